/** Locks: acquire / tryAcquire / withLock / runExclusive / inspect / close over one backend. */
import { setMaxListeners } from 'node:events';
import type { Backend, Grant } from './backend.js';
import { toMs, type Duration } from './duration.js';
import { InvalidArgumentError, LeaseholdError, LockTimeoutError } from './errors.js';
import { channels, emit } from './events.js';
import { Keeper } from './keeper.js';
import { LeaseImpl, type Lease, type LeaseHost } from './lease.js';
import { idempotent, type IdempotentOptions } from './recipes/idempotency.js';
import { ElectionImpl, type ElectOptions, type Election } from './recipes/election.js';
import { checkBoolean, checkKey, checkOptions, checkSignal, newToken } from './validate.js';
import { anySignal, backoffDelay, now, parseRetry, sleep, TurnQueue, type Backoff, type RetryOptions } from './wait.js';

export interface LocksOptions {
  /** Lease time-to-live (default 30s). */
  ttl?: Duration;
  /** Renew held leases at ttl/3 while held (default true). */
  renew?: boolean;
  /** How long `acquire` waits (default 30s). */
  wait?: Duration;
  /** Namespace of every key (default 'leasehold'). */
  prefix?: string;
  /** Polling backoff for backends without push wake-ups. */
  retry?: RetryOptions;
}

export interface AcquireOptions {
  ttl?: Duration;
  renew?: boolean;
  wait?: Duration;
  signal?: AbortSignal;
  /** Holder value stored beside the lock (backends with the `value` capability). */
  value?: string;
}

export type TryAcquireOptions = Omit<AcquireOptions, 'wait'>;

export interface RunExclusiveOptions {
  /** Keep the lock at least this long from the grant, even if `fn` finishes sooner (default 0). */
  lockAtLeastFor?: Duration;
  /** The lock's TTL: it is never held longer, even if the process dies (default: the Locks' ttl). */
  lockAtMostFor?: Duration;
  signal?: AbortSignal;
}

export type RunExclusiveResult<T> = { ran: true; value: T } | { ran: false };

export interface LockInfo {
  key: string;
  fence: bigint;
  remainingMs: number;
  value?: string;
}

export interface Locks {
  readonly backend: Backend;
  acquire(key: string, options?: AcquireOptions): Promise<Lease>;
  tryAcquire(key: string, options?: TryAcquireOptions): Promise<Lease | null>;
  withLock<T>(key: string, fn: (lease: Lease) => Promise<T> | T, options?: AcquireOptions): Promise<T>;
  runExclusive<T>(
    key: string,
    fn: (lease: Lease) => Promise<T> | T,
    options?: RunExclusiveOptions,
  ): Promise<RunExclusiveResult<T>>;
  inspect(key: string): Promise<LockInfo | null>;
  /** Leader election on `name`: campaign, resign, observe. Needs a backend that stores a value. */
  elect(name: string, options: ElectOptions): Election;
  /** Runs `fn` once per idempotency key; repeats get the stored (JSON) result. */
  idempotent<T>(key: string, fn: (lease: Lease) => Promise<T> | T, options?: IdempotentOptions): Promise<T>;
  /** Releases every lease this instance holds, stops renewal, closes the backend's own connections. */
  close(): Promise<void>;
}

const LOCKS_OPTS = ['ttl', 'renew', 'wait', 'prefix', 'retry'] as const;
const ACQUIRE_OPTS = ['ttl', 'renew', 'wait', 'signal', 'value'] as const;
const TRY_OPTS = ['ttl', 'renew', 'signal', 'value'] as const;
const EXCLUSIVE_OPTS = ['lockAtLeastFor', 'lockAtMostFor', 'signal'] as const;

interface Parsed {
  key: string;
  fullKey: string;
  ttlMs: number;
  renew: boolean;
  waitMs: number;
  signal: AbortSignal | undefined;
  value: string | undefined;
}

export class ClosedError extends LeaseholdError {
  constructor() {
    super('LEASEHOLD_CLOSED', 'this Locks instance is closed');
  }
}

export function createLocks(backend: Backend, defaults?: LocksOptions): Locks {
  return new LocksImpl(backend, defaults);
}

function checkBackend(b: unknown): Backend {
  const x = b as Backend;
  if (
    !x ||
    typeof x !== 'object' ||
    typeof x.acquire !== 'function' ||
    typeof x.release !== 'function' ||
    typeof x.extend !== 'function'
  ) {
    throw new InvalidArgumentError('createLocks: the first argument must be a backend, e.g. memory() or redis(client)');
  }
  return x;
}

class LocksImpl implements Locks, LeaseHost {
  readonly backend: Backend;
  private readonly keeper: Keeper;
  private readonly turns = new TurnQueue();
  private readonly held = new Set<LeaseImpl>();
  private readonly kicks = new Map<string, AbortController>();
  private readonly closing = new AbortController();
  private readonly ttlMs: number;
  private readonly renew: boolean;
  private readonly waitMs: number;
  private readonly prefix: string;
  private readonly retry: Backoff;

  constructor(backend: Backend, defaults?: LocksOptions) {
    this.backend = checkBackend(backend);
    const o = checkOptions<LocksOptions>(defaults, LOCKS_OPTS, 'createLocks');
    this.ttlMs = o.ttl === undefined ? 30_000 : toMs(o.ttl, 'ttl');
    this.renew = checkBoolean(o.renew, 'renew') ?? true;
    this.waitMs = o.wait === undefined ? 30_000 : toMs(o.wait, 'wait', { allowZero: true });
    if (
      o.prefix !== undefined &&
      (typeof o.prefix !== 'string' || o.prefix.length === 0 || Buffer.byteLength(o.prefix) > 256)
    ) {
      throw new InvalidArgumentError('prefix must be a non-empty string of at most 256 bytes');
    }
    this.prefix = o.prefix ?? 'leasehold';
    this.retry = parseRetry(o.retry, 'createLocks');
    this.keeper = new Keeper(this.backend);
    setMaxListeners(0, this.closing.signal); // one listener per waiting call, by design
    this.backend.onLost?.((fullKey, token, cause) => {
      this.keeper.find(fullKey, token)?.lose('the backend session holding it ended', cause);
    });
  }

  // ---- LeaseHost
  track(lease: LeaseImpl): void {
    this.held.add(lease);
    this.keeper.add(lease);
  }
  untrack(lease: LeaseImpl): void {
    this.held.delete(lease);
    this.keeper.remove(lease);
  }
  settled(lease: LeaseImpl): void {
    this.kicks.get(lease.fullKey)?.abort();
  }

  private parse(key: unknown, opts: unknown, allowed: readonly string[], where: string): Parsed {
    const k = checkKey(key);
    const o = checkOptions<AcquireOptions>(opts, allowed, where);
    if (o.value !== undefined && typeof o.value !== 'string')
      throw new InvalidArgumentError(`${where}: value must be a string`);
    if (o.value !== undefined && !this.backend.capabilities.value) {
      throw new InvalidArgumentError(`${where}: the ${this.backend.name} backend cannot store a holder value`);
    }
    return {
      key: k,
      fullKey: `${this.prefix}:${k}`,
      ttlMs: o.ttl === undefined ? this.ttlMs : toMs(o.ttl, 'ttl'),
      renew: checkBoolean(o.renew, 'renew') ?? this.renew,
      waitMs: o.wait === undefined ? this.waitMs : toMs(o.wait, 'wait', { allowZero: true }),
      signal: checkSignal(o.signal, where),
      value: o.value,
    };
  }

  private assertOpen(): void {
    if (this.closing.signal.aborted) throw new ClosedError();
  }

  private grant(p: Parsed, token: string, g: Grant, sentAt: number, waitedMs: number, attempts: number): LeaseImpl {
    const lease = new LeaseImpl(this, p.key, p.fullKey, token, g.fence, p.ttlMs, p.renew, sentAt);
    this.track(lease);
    emit(channels.acquire, { backend: this.backend.name, key: p.key, fence: g.fence, waitedMs, attempts });
    return lease;
  }

  async acquire(key: string, options?: AcquireOptions): Promise<Lease> {
    const p = this.parse(key, options, ACQUIRE_OPTS, 'acquire');
    this.assertOpen();
    if (p.signal?.aborted) throw p.signal.reason;
    const started = now();
    const token = newToken();
    if (this.turns.busy(p.fullKey)) return this.wait(p, token, started, false);
    // fast path: nobody local is ahead of us; one attempt before any timer or signal is set up
    this.turns.takeNow(p.fullKey);
    let waiting = false;
    try {
      const g = await this.backend.acquire(p.fullKey, { token, ttlMs: p.ttlMs, queue: true, value: p.value });
      if (g) return await this.granted(p, token, g, started, started, 1);
      waiting = true;
      return await this.wait(p, token, started, true);
    } finally {
      if (!waiting) this.turns.pass(p.fullKey);
    }
  }

  /** A grant arrived: unless the caller gave up meanwhile, it becomes a lease. */
  private async granted(p: Parsed, token: string, g: Grant, sentAt: number, started: number, attempts: number) {
    if (p.signal?.aborted || this.closing.signal.aborted) {
      await this.backend.release(p.fullKey, token).catch(() => false);
      throw p.signal?.aborted ? p.signal.reason : new ClosedError();
    }
    return this.grant(p, token, g, sentAt, now() - started, attempts);
  }

  /**
   * The slow path: wait for the local turn (unless `hasTurn`: then the first attempt was refused
   * and we are queued at the backend), then alternate pauses and attempts until the deadline.
   */
  private async wait(p: Parsed, token: string, started: number, hasTurn: boolean): Promise<Lease> {
    const left = Math.max(0, p.waitMs - (now() - started));
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(new LockTimeoutError(p.key, now() - started)), left);
    const stop = anySignal([p.signal, this.closing.signal]);
    const all = anySignal([stop.signal, deadline.signal]);
    let queued = hasTurn;
    let outcome: 'acquired' | 'timeout' | 'aborted' | 'error' = 'error';
    emit(channels.wait, { backend: this.backend.name, key: p.key, phase: 'start' });
    try {
      if (!hasTurn) await this.turns.take(p.fullKey, all.signal);
      try {
        for (let attempt = hasTurn ? 2 : 1; ; attempt++) {
          if (queued) {
            if (all.signal.aborted) throw all.signal.reason;
            await this.pause(p, all.signal, attempt - 1);
          }
          if (stop.signal.aborted) throw stop.signal.reason;
          const sentAt = now();
          const g = await this.backend.acquire(p.fullKey, { token, ttlMs: p.ttlMs, queue: true, value: p.value });
          if (g) {
            const lease = await this.granted(p, token, g, sentAt, started, attempt);
            outcome = 'acquired';
            return lease;
          }
          queued = true;
        }
      } finally {
        this.turns.pass(p.fullKey);
      }
    } catch (e) {
      outcome = e instanceof LockTimeoutError ? 'timeout' : stop.signal.aborted ? 'aborted' : 'error';
      if (queued && this.backend.leave) this.backend.leave(p.fullKey, token).catch(() => {});
      throw e;
    } finally {
      clearTimeout(timer);
      stop.dispose();
      all.dispose();
      emit(channels.wait, { backend: this.backend.name, key: p.key, phase: 'end', waitedMs: now() - started, outcome });
    }
  }

  /** Waits for a push wake-up (or a local release), else for a jittered backoff. */
  private async pause(p: Parsed, signal: AbortSignal, attempt: number): Promise<void> {
    const kick = new AbortController();
    this.kicks.set(p.fullKey, kick);
    const both = anySignal([signal, kick.signal]);
    try {
      if (this.backend.waitForChange) {
        // bounded so a waiter refreshes its place in a fair queue and survives a missed message
        await this.backend.waitForChange(p.fullKey, both.signal, Math.max(1, Math.floor(p.ttlMs / 3)));
      } else {
        await sleep(backoffDelay(this.retry, attempt - 1), both.signal);
      }
    } finally {
      both.dispose();
      if (this.kicks.get(p.fullKey) === kick) this.kicks.delete(p.fullKey);
    }
  }

  async tryAcquire(key: string, options?: TryAcquireOptions): Promise<Lease | null> {
    const p = this.parse(key, options, TRY_OPTS, 'tryAcquire');
    this.assertOpen();
    if (p.signal?.aborted) throw p.signal.reason;
    // someone in this process is already acquiring this key: one attempt would fail anyway
    if (this.turns.busy(p.fullKey)) return null;
    await this.turns.take(p.fullKey, this.closing.signal);
    try {
      const token = newToken();
      const sentAt = now();
      const g = await this.backend.acquire(p.fullKey, { token, ttlMs: p.ttlMs, queue: false, value: p.value });
      if (!g) return null;
      if (p.signal?.aborted || this.closing.signal.aborted) {
        await this.backend.release(p.fullKey, token).catch(() => false);
        throw p.signal?.aborted ? p.signal.reason : new ClosedError();
      }
      return this.grant(p, token, g, sentAt, now() - sentAt, 1);
    } finally {
      this.turns.pass(p.fullKey);
    }
  }

  async withLock<T>(key: string, fn: (lease: Lease) => Promise<T> | T, options?: AcquireOptions): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('withLock: fn must be a function');
    const lease = (await this.acquire(key, options)) as LeaseImpl;
    let value: T;
    try {
      value = await fn(lease);
    } catch (e) {
      await this.quietRelease(lease);
      throw e;
    }
    const lost = lease.lostError;
    await this.quietRelease(lease);
    // the work finished, but not under the lock the whole time: the caller must know
    if (lost) throw lost;
    return value;
  }

  async runExclusive<T>(
    key: string,
    fn: (lease: Lease) => Promise<T> | T,
    options?: RunExclusiveOptions,
  ): Promise<RunExclusiveResult<T>> {
    checkKey(key);
    if (typeof fn !== 'function') throw new InvalidArgumentError('runExclusive: fn must be a function');
    const o = checkOptions<RunExclusiveOptions>(options, EXCLUSIVE_OPTS, 'runExclusive');
    const atMost = o.lockAtMostFor === undefined ? this.ttlMs : toMs(o.lockAtMostFor, 'lockAtMostFor');
    const atLeast = o.lockAtLeastFor === undefined ? 0 : toMs(o.lockAtLeastFor, 'lockAtLeastFor', { allowZero: true });
    if (atLeast > atMost) throw new InvalidArgumentError('lockAtLeastFor must not exceed lockAtMostFor');
    const lease = (await this.tryAcquire(key, { ttl: atMost, renew: false, signal: o.signal })) as LeaseImpl | null;
    if (!lease) return { ran: false };
    try {
      return { ran: true, value: await fn(lease) };
    } finally {
      const keep = Math.floor(atLeast - (now() - lease.grantedAt));
      if (keep >= 1 && lease.state === 'held') {
        // the stored expiry keeps the window: it outlives close() and a crash
        try {
          await lease.extend(keep);
          lease.detach();
        } catch {
          await this.quietRelease(lease);
        }
      } else {
        await this.quietRelease(lease);
      }
    }
  }

  private async quietRelease(lease: LeaseImpl): Promise<void> {
    try {
      await lease.release();
    } catch {
      // reported on the leasehold:release channel; the lock runs out by its TTL
    }
  }

  async inspect(key: string): Promise<LockInfo | null> {
    const k = checkKey(key);
    this.assertOpen();
    if (!this.backend.inspect)
      throw new LeaseholdError('LEASEHOLD_UNSUPPORTED', `the ${this.backend.name} backend cannot inspect locks`);
    const info = await this.backend.inspect(`${this.prefix}:${k}`);
    if (!info) return null;
    const out: LockInfo = { key: k, fence: info.fence, remainingMs: info.remainingMs };
    if (info.value !== undefined) out.value = info.value;
    return out;
  }

  elect(name: string, options: ElectOptions): Election {
    this.assertOpen();
    return ElectionImpl.create(this, name, options);
  }

  idempotent<T>(key: string, fn: (lease: Lease) => Promise<T> | T, options?: IdempotentOptions): Promise<T> {
    return idempotent(this, key, fn, options);
  }

  fullKey(key: string): string {
    return `${this.prefix}:${key}`;
  }

  async close(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort(new ClosedError());
    await Promise.allSettled([...this.held].map((l) => l.release()));
    this.keeper.stop();
    await this.backend.close();
  }
}
