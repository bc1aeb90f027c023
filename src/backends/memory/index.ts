/**
 * In-process backend: a map of leases with per-key fence counters, a fair arrival queue per key,
 * and push wake-ups by an in-process event. Share one `MemoryStore` between several `memory()`
 * backends to model several processes on one server (tests, demos).
 */
import { inspect } from 'node:util';
import type { AcquireRequest, Backend, ExtendItem, Grant, LockInfo, ResultStore } from '../../backend.js';
import { ClosedError, InvalidArgumentError } from '../../errors.js';
import { checkOptions } from '../../validate.js';

interface Entry {
  token: string;
  expiresAt: number;
  value: string | undefined;
  fence: bigint;
}

const clock = (): number => performance.now();

/** Marks a MemoryStore of either build (ESM or CommonJS): an app may load both copies of the class. */
const STORE = Symbol.for('leasehold.memory-store');

/** The shared state: what a server would hold. */
export class MemoryStore {
  /** A MemoryStore of this build or of leasehold's other one (the same class, loaded twice). */
  static [Symbol.hasInstance](x: unknown): boolean {
    return typeof x === 'object' && x !== null && (x as { [STORE]?: unknown })[STORE] === true;
  }
  static {
    Object.defineProperty(this.prototype, STORE, { value: true });
  }
  /** The locks' tokens live here: never printed. */
  [inspect.custom](): string {
    return `MemoryStore { locks: ${this.locks.size} }`;
  }
  readonly locks = new Map<string, Entry>();
  /**
   * The last fence granted, on any key: one counter for the store, so a fence grows per key
   * without a record per key that was ever locked (a worker locking a key per order id would keep
   * one for each forever). Fences are unique across keys, not consecutive per key.
   */
  lastFence = 0n;
  /** Arrival queue per key: token → expiry of that waiter's place (insertion order = arrival). */
  readonly queues = new Map<string, Map<string, number>>();
  private readonly listeners = new Map<string, Set<() => void>>();
  /** Observers per key: told of every change of holder (grant, release). */
  private readonly watchers = new Map<string, Set<() => void>>();
  /**
   * Per key: the last wake-up sent, a number that never repeats in the store (a waiter compares it
   * with what it saw when it tried). Kept while the key is held or has waiters or listeners.
   */
  readonly generations = new Map<string, number>();
  private generation = 0;
  /** Idempotency results: lock key → stored result. */
  readonly results = new Map<string, { value: string; expiresAt: number }>();
  /** Writes since the last sweep of expired locks and results. */
  private writes = 0;

  live(key: string): Entry | undefined {
    const e = this.locks.get(key);
    if (e && e.expiresAt <= clock()) {
      this.locks.delete(key);
      return undefined;
    }
    return e;
  }

  queueHead(key: string): string | undefined {
    const q = this.queues.get(key);
    if (!q) return undefined;
    const t = clock();
    for (const [token, exp] of q) {
      if (exp > t) return token;
      q.delete(token);
    }
    this.queues.delete(key);
    return undefined;
  }

  /** Removes `token` from the key's queue (and the queue once empty); true if it was there. */
  dequeue(key: string, token: string): boolean {
    const q = this.queues.get(key);
    if (!q?.delete(token)) return false;
    if (q.size === 0) this.queues.delete(key);
    return true;
  }

  /**
   * Amortised clean-up, every 1,024 writes: expired locks and results that nobody touched again
   * (a key used once) would otherwise stay forever.
   */
  wrote(): void {
    if (++this.writes < 1024) return;
    this.writes = 0;
    const t = clock();
    for (const [key, e] of this.locks) if (e.expiresAt <= t) this.locks.delete(key);
    for (const [key, r] of this.results) if (r.expiresAt <= t) this.results.delete(key);
    for (const key of this.generations.keys()) this.forget(key);
  }

  /** Drops the key's wake-up record when nothing can compare it any more. */
  private forget(key: string): void {
    if (!this.locks.has(key) && !this.queues.has(key) && !this.listeners.has(key)) this.generations.delete(key);
  }

  on(key: string, fn: () => void): () => void {
    let set = this.listeners.get(key);
    if (!set) this.listeners.set(key, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.listeners.get(key) === set) this.listeners.delete(key);
    };
  }

  watch(key: string, fn: () => void): () => void {
    let set = this.watchers.get(key);
    if (!set) this.watchers.set(key, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.watchers.get(key) === set) this.watchers.delete(key);
    };
  }

  /** The holder of `key` changed: tell its observers. */
  changed(key: string): void {
    const set = this.watchers.get(key);
    if (set) for (const fn of [...set]) fn();
  }

  notify(key: string): void {
    this.generations.set(key, ++this.generation);
    const set = this.listeners.get(key);
    if (set) for (const fn of [...set]) fn();
    this.forget(key);
  }
}

export interface MemoryOptions {
  /** Share state with other memory backends (several "processes" on one "server"). */
  store?: MemoryStore;
}

export function memory(options?: MemoryOptions): MemoryBackend {
  if (options instanceof MemoryStore) {
    throw new InvalidArgumentError('memory: pass a shared store as an option: memory({ store })');
  }
  const o = checkOptions<MemoryOptions>(options, ['store'], 'memory');
  if (o.store !== undefined && !(o.store instanceof MemoryStore))
    throw new InvalidArgumentError('memory: store must be a MemoryStore');
  return new MemoryBackend(o.store ?? new MemoryStore());
}

export class MemoryBackend implements Backend {
  readonly name = 'memory';
  readonly capabilities = { push: true, fair: true, value: true, results: true, session: false } as const;
  readonly results: ResultStore = {
    get: async (lockKey) => {
      const r = this.store.results.get(lockKey);
      if (r && r.expiresAt <= clock()) this.store.results.delete(lockKey);
      return r && r.expiresAt > clock() ? r.value : null;
    },
    put: async (lockKey, token, value, ttlMs) => {
      if (this.store.live(lockKey)?.token !== token) return false;
      this.store.results.set(lockKey, { value, expiresAt: clock() + ttlMs });
      this.store.wrote();
      return true;
    },
  };
  private closed = false;
  /** Per key: the wake-up generation when our last attempt was refused. */
  private readonly seen = new Map<string, number>();

  constructor(readonly store: MemoryStore) {}

  async acquire(key: string, req: AcquireRequest): Promise<Grant | null> {
    this.assertOpen();
    const s = this.store;
    const t = clock();
    const head = s.queueHead(key);
    if (!s.live(key) && (head === undefined || head === req.token)) {
      s.dequeue(key, req.token);
      this.seen.delete(key);
      const fence = ++s.lastFence;
      s.locks.set(key, { token: req.token, expiresAt: t + req.ttlMs, value: req.value, fence });
      s.changed(key);
      s.wrote();
      return { fence };
    }
    if (req.queue) {
      this.seen.set(key, s.generations.get(key) ?? 0);
      let q = s.queues.get(key);
      if (!q) s.queues.set(key, (q = new Map()));
      q.set(req.token, t + req.ttlMs); // Map.set keeps the original position: arrival order
    }
    return null;
  }

  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    this.assertOpen();
    return items.map(({ key, token, ttlMs }) => {
      const e = this.store.live(key);
      if (!e || e.token !== token) return false;
      e.expiresAt = clock() + ttlMs;
      return true;
    });
  }

  async release(key: string, token: string): Promise<boolean> {
    this.assertOpen();
    const e = this.store.live(key);
    if (!e || e.token !== token) return false;
    this.store.locks.delete(key);
    this.store.notify(key);
    this.store.changed(key);
    return true;
  }

  async leave(key: string, token: string): Promise<void> {
    this.seen.delete(key);
    if (this.store.dequeue(key, token)) this.store.notify(key);
  }

  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    return new Promise((resolve) => {
      if (signal.aborted || this.closed) return resolve();
      // a release that came between our refused attempt and now: try again at once
      if ((this.store.generations.get(key) ?? 0) !== (this.seen.get(key) ?? 0)) return resolve();
      const e = this.store.live(key);
      // an expiry wakes nobody by itself: wake at the holder's expiry at the latest
      const until = e ? Math.min(maxMs, Math.max(1, Math.ceil(e.expiresAt - clock()) + 1)) : maxMs;
      const done = () => {
        clearTimeout(timer);
        off();
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, until);
      const off = this.store.on(key, done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  async inspect(key: string): Promise<LockInfo | null> {
    this.assertOpen();
    const e = this.store.live(key);
    if (!e) return null;
    const info: LockInfo = {
      key,
      fence: e.fence,
      remainingMs: Math.max(0, Math.round(e.expiresAt - clock())),
    };
    return e.value === undefined ? info : { ...info, value: e.value };
  }

  async watch(key: string, onChange: () => void): Promise<() => void> {
    this.assertOpen();
    return this.store.watch(key, onChange);
  }

  async *list(prefix: string): AsyncIterable<LockInfo> {
    this.assertOpen();
    for (const key of [...this.store.locks.keys()]) {
      if (!key.startsWith(prefix)) continue;
      const info = await this.inspect(key);
      if (info) yield info;
    }
  }

  async forceRelease(key: string): Promise<LockInfo | null> {
    const info = await this.inspect(key);
    if (!info) return null;
    this.store.locks.delete(key);
    this.store.notify(key);
    this.store.changed(key);
    return info;
  }

  /** Never the store (it holds tokens), at any depth. */
  [inspect.custom](): string {
    return `MemoryBackend { locks: ${this.store.locks.size}${this.closed ? ', closed' : ''} }`;
  }
  toJSON(): { name: string } {
    return { name: this.name };
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  private assertOpen(): void {
    if (this.closed) throw new ClosedError('this memory backend is closed');
  }
}
