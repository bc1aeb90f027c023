/** Locks: acquire / tryAcquire / withLock / runExclusive / inspect / close over one backend. */
import { setMaxListeners } from 'node:events';
import { inspect } from 'node:util';
import { Acquirer, type Parsed } from './acquire.js';
import type { Backend, Grant, ResultStore } from './backend.js';
import { Calls } from './calls.js';
import { smallTtlWarning, toMs, type Duration } from './duration.js';
import { ClosedError, InvalidArgumentError, LeaseholdError } from './errors.js';
import { channels, emit, warn } from './events.js';
import { Keeper } from './keeper.js';
import { checkTtl, LeaseImpl, type Lease, type LeaseHost } from './lease.js';
import { idempotent, type IdempotentOptions } from './recipes/idempotency.js';
import { ElectionImpl, type ElectOptions, type Election } from './recipes/election.js';
import { runExclusive, withLock, type RunExclusiveOptions, type RunExclusiveResult } from './scoped.js';
import { checkBoolean, checkKey, checkOptions, checkSignal, checkString, newToken } from './validate.js';
import { parseRetry, race, type Backoff, type RetryOptions } from './wait.js';

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
  /**
   * The longest the engine waits for one backend call (an acquire attempt, an extend, a release,
   * an inspect) before giving up on it with a BackendError, even if the client never answers
   * (default 5s). `close()` takes at most twice this.
   */
  opTimeout?: Duration;
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

export type { RunExclusiveOptions, RunExclusiveResult };

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
  /**
   * Acquires (waits), runs `fn` while the lease is renewed, releases. Rejects with LeaseLostError
   * after `fn` returned if the lease was lost under it, or its release found the lock no longer
   * ours (deleted or taken over under a short `fn`); `fn`'s own error wins.
   */
  withLock<T>(key: string, fn: (lease: Lease) => Promise<T> | T, options?: AcquireOptions): Promise<T>;
  /**
   * Runs `fn` if the lock is free (`{ ran: false }` if not), and keeps it for the rest of a
   * `lockAtLeastFor` window. Rejects with LeaseLostError after `fn` returned if the lease (never
   * renewed) was lost under it: `fn` ran past `lockAtMostFor`, or the lock was no longer ours
   * when its window was to be kept (or, with no window, when it was released).
   */
  runExclusive<T>(
    key: string,
    fn: (lease: Lease) => Promise<T> | T,
    options?: RunExclusiveOptions,
  ): Promise<RunExclusiveResult<T>>;
  inspect(key: string): Promise<LockInfo | null>;
  /**
   * Leader election on `name`: campaign, resign, observe. A candidate passes its `value` (what
   * observers see); without options the handle only observes (`leader()`, `observe()`).
   */
  elect(name: string, options?: ElectOptions): Election;
  /** The locks held under `prefix` (of the caller's keys, default all), as `inspect` shows them. */
  list(prefix?: string): AsyncIterable<LockInfo>;
  /** Runs `fn` once per idempotency key; repeats get the stored (JSON) result. */
  idempotent<T>(key: string, fn: (lease: Lease) => Promise<T> | T, options?: IdempotentOptions): Promise<T>;
  /**
   * Releases every lease this instance holds, waits (at most `opTimeout`) for calls in flight and
   * releases what they got, stops renewal, then closes the backend's own connections (at most
   * `opTimeout` more). Calls still waiting reject with a ClosedError at once. A `runExclusive`
   * lock whose function still runs is not released but left to its `lockAtMostFor` expiry (as
   * after a crash), and that `runExclusive` rejects with a ClosedError once its function returns.
   */
  close(): Promise<void>;
}

const LOCKS_OPTS = ['ttl', 'renew', 'wait', 'prefix', 'retry', 'opTimeout'] as const;
const ACQUIRE_OPTS = ['ttl', 'renew', 'wait', 'signal', 'value'] as const;
const TRY_OPTS = ['ttl', 'renew', 'signal', 'value'] as const;

export { ClosedError };

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
  readonly calls: Calls;
  readonly retry: Backoff;
  private readonly keeper: Keeper;
  private readonly acquirer: Acquirer;
  /**
   * The held leases, by token (a backend reports a lost lock by its key and token). A `#` field:
   * its keys are tokens, and neither `util.inspect` nor a walk over properties may reach them.
   */
  readonly #held = new Map<string, LeaseImpl>();
  /** Held leases that close() hands to a callback instead of releasing (runExclusive's, src/scoped.ts). */
  readonly #pinned = new Map<LeaseImpl, () => void>();
  private readonly closing = new AbortController();
  private closed: Promise<void> | null = null;
  /** The default ttl (also runExclusive's default lockAtMostFor). */
  readonly ttlMs: number;
  private readonly renew: boolean;
  private readonly waitMs: number;
  private readonly prefix: string;
  /** The backend's result store, each call bounded (idempotency). */
  readonly results: ResultStore | undefined;
  /** Small TTLs already warned about (once per value per instance). */
  private readonly warned = new Set<number>();

  constructor(backend: Backend, defaults?: LocksOptions) {
    this.backend = checkBackend(backend);
    const o = checkOptions<LocksOptions>(defaults, LOCKS_OPTS, 'createLocks');
    this.ttlMs = o.ttl === undefined ? 30_000 : checkTtl(toMs(o.ttl, 'ttl'), 'createLocks: a ttl');
    this.renew = checkBoolean(o.renew, 'renew') ?? true;
    this.waitMs = o.wait === undefined ? 30_000 : toMs(o.wait, 'wait', { allowZero: true });
    if (o.prefix !== undefined) checkString(o.prefix, 'prefix', 256);
    this.prefix = o.prefix ?? 'leasehold';
    this.retry = parseRetry(o.retry, 'createLocks');
    const opTimeoutMs = o.opTimeout === undefined ? 5000 : toMs(o.opTimeout, 'opTimeout');
    this.calls = new Calls(this.backend.name, opTimeoutMs);
    this.keeper = new Keeper(this.backend, this.calls);
    this.acquirer = new Acquirer(this);
    this.warnTtl(this.ttlMs, this.renew);
    setMaxListeners(0, this.closing.signal); // one listener per waiting call, by design
    this.results = this.backend.results ? this.boundedResults(this.backend.results) : undefined;
    // looked up among the held leases, not in the keeper: whatever the keeper knows, a lease the
    // backend reports gone is lost
    this.backend.onLost?.((fullKey, token, cause) => {
      const l = this.#held.get(token);
      if (l?.fullKey === fullKey) l.lose('the backend reports it gone (its session ended, or it ran out there)', cause);
    });
  }

  get closingSignal(): AbortSignal {
    return this.closing.signal;
  }

  private boundedResults(store: ResultStore): ResultStore {
    return {
      get: (lockKey) => this.calls.run('result read', () => store.get(lockKey), { closable: true }),
      put: (lockKey, token, value, ttlMs) =>
        this.calls.run('result write', () => store.put(lockKey, token, value, ttlMs), {
          closable: true,
          secrets: [token],
        }),
    };
  }

  // ---- ScopedHost
  pin(lease: LeaseImpl, onClose: () => void): void {
    this.#pinned.set(lease, onClose);
  }
  unpin(lease: LeaseImpl): void {
    this.#pinned.delete(lease);
  }

  // ---- LeaseHost
  untrack(lease: LeaseImpl): void {
    if (this.#held.get(lease.token) === lease) this.#held.delete(lease.token);
    this.keeper.remove(lease);
  }
  settled(lease: LeaseImpl): void {
    this.acquirer.kick(lease.fullKey);
  }
  ungroup(lease: LeaseImpl): void {
    this.keeper.ungroup(lease);
  }
  rescheduled(lease: LeaseImpl): void {
    this.keeper.reschedule(lease);
  }

  private parse(key: unknown, opts: unknown, allowed: readonly string[], where: string): Parsed {
    const k = checkKey(key);
    const o = checkOptions<AcquireOptions>(opts, allowed, where);
    if (o.value !== undefined) checkString(o.value, `${where}: value`, Infinity, true);
    if (o.value !== undefined && !this.backend.capabilities.value) {
      throw new InvalidArgumentError(`${where}: the ${this.backend.name} backend cannot store a holder value`);
    }
    if (o.value !== undefined) this.backend.checkValue?.(o.value, `${where}: value`);
    const p: Parsed = {
      key: k,
      fullKey: `${this.prefix}:${k}`,
      ttlMs: o.ttl === undefined ? this.ttlMs : checkTtl(toMs(o.ttl, 'ttl'), `${where}: a ttl`),
      renew: checkBoolean(o.renew, 'renew') ?? this.renew,
      waitMs: o.wait === undefined ? this.waitMs : toMs(o.wait, 'wait', { allowZero: true }),
      signal: checkSignal(o.signal, where),
      value: o.value,
    };
    if (o.ttl !== undefined || o.renew !== undefined) this.warnTtl(p.ttlMs, p.renew, k);
    return p;
  }

  /** A renewed lease with a TTL too short to renew reliably: said once per value on `leasehold:warning`. */
  private warnTtl(ttlMs: number, renew: boolean, key?: string): void {
    const w = renew && !this.warned.has(ttlMs) ? smallTtlWarning(ttlMs, key) : null;
    if (w && warn(w) && this.warned.size < 64) this.warned.add(ttlMs);
  }

  private assertOpen(): void {
    if (this.closing.signal.aborted) throw new ClosedError();
  }

  /** A grant the caller still wants: it becomes a tracked, renewed lease. */
  grant(p: Parsed, token: string, g: Grant, sentAt: number, waitedMs: number, attempts: number): LeaseImpl {
    const lease = new LeaseImpl(this, p.key, p.fullKey, token, g.fence, p.ttlMs, p.renew, sentAt);
    if (g.expiresAt !== undefined && g.session === undefined) lease.claimedUntil(g.expiresAt);
    this.#held.set(token, lease);
    this.acquirer.held(p.fullKey);
    this.keeper.add(lease, g.session, sentAt); // a lease that hangs off a session is renewed with it
    if (channels.acquire.hasSubscribers) {
      emit(channels.acquire, { backend: this.backend.name, key: p.key, fence: g.fence, waitedMs, attempts });
    }
    return lease;
  }

  async acquire(key: string, options?: AcquireOptions): Promise<Lease> {
    const p = this.parse(key, options, ACQUIRE_OPTS, 'acquire');
    this.assertOpen();
    if (p.signal?.aborted) throw p.signal.reason;
    return (await this.acquirer.acquire(p, newToken())) as Lease;
  }

  async tryAcquire(key: string, options?: TryAcquireOptions): Promise<Lease | null> {
    const p = this.parse(key, options, TRY_OPTS, 'tryAcquire');
    this.assertOpen();
    if (p.signal?.aborted) throw p.signal.reason;
    return (await this.acquirer.tryAcquire(p, newToken())) as Lease | null;
  }

  withLock<T>(key: string, fn: (lease: Lease) => Promise<T> | T, options?: AcquireOptions): Promise<T> {
    return withLock(this, key, fn, options);
  }

  runExclusive<T>(
    key: string,
    fn: (lease: Lease) => Promise<T> | T,
    options?: RunExclusiveOptions,
  ): Promise<RunExclusiveResult<T>> {
    return runExclusive(this, key, fn, options);
  }

  async inspect(key: string): Promise<LockInfo | null> {
    const k = checkKey(key);
    this.assertOpen();
    if (!this.backend.inspect)
      throw new LeaseholdError('LEASEHOLD_UNSUPPORTED', `the ${this.backend.name} backend cannot inspect locks`);
    const backend = this.backend;
    const info = await this.calls.run('inspect', () => backend.inspect!(`${this.prefix}:${k}`), {
      key: k,
      closable: true,
    });
    if (!info) return null;
    const out: LockInfo = { key: k, fence: info.fence, remainingMs: info.remainingMs };
    if (info.value !== undefined) out.value = info.value;
    return out;
  }

  elect(name: string, options?: ElectOptions): Election {
    this.assertOpen();
    return ElectionImpl.create(this, name, options);
  }

  async *list(prefix = ''): AsyncIterable<LockInfo> {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('list: prefix must be a string');
    if (prefix !== '') checkKey(prefix, 'list: prefix');
    this.assertOpen();
    if (!this.backend.list)
      throw new LeaseholdError('LEASEHOLD_UNSUPPORTED', `the ${this.backend.name} backend cannot list locks`);
    const ns = `${this.prefix}:`;
    const it = this.backend.list(ns + prefix)[Symbol.asyncIterator]();
    let finished = false;
    try {
      for (;;) {
        // each step is a bounded call: a hung client cannot hang the iteration
        const r = await this.calls.run('list', () => it.next(), { closable: true });
        if (r.done) {
          finished = true;
          return;
        }
        const info = r.value;
        if (!info.key.startsWith(ns)) continue;
        const out: LockInfo = { key: info.key.slice(ns.length), fence: info.fence, remainingMs: info.remainingMs };
        if (info.value !== undefined) out.value = info.value;
        yield out;
      }
    } finally {
      if (!finished && it.return) this.calls.track(Promise.resolve(it.return()).catch(() => {}));
    }
  }

  idempotent<T>(key: string, fn: (lease: Lease) => Promise<T> | T, options?: IdempotentOptions): Promise<T> {
    return idempotent(this, key, fn, options);
  }

  /** A bounded `backend.watch` (null when the backend cannot push); a late watch is ended at once. */
  watch(key: string, onChange: () => void, signal?: AbortSignal): Promise<(() => void) | null> {
    const backend = this.backend;
    if (!backend.watch) return Promise.resolve(null);
    return this.calls.run('watch', () => backend.watch!(this.fullKey(key), onChange), {
      key,
      signal,
      closable: true,
      late: (off) => off(),
    });
  }

  fullKey(key: string): string {
    return `${this.prefix}:${key}`;
  }

  close(): Promise<void> {
    this.closed ??= this.shutdown();
    return this.closed;
  }

  private async shutdown(): Promise<void> {
    const closed = new ClosedError();
    this.closing.abort(closed); // every waiting call rejects now
    this.calls.abortAll(closed); // and every call in flight
    const bound = this.calls.opTimeoutMs;
    try {
      this.backend.closing?.(); // before the releases: a session backend may stop waiting for a server gone
    } catch {
      /* a hint only */
    }
    this.keeper.stop();
    for (const lease of [...this.#held.values()]) {
      const onClose = this.#pinned.get(lease);
      if (onClose)
        onClose(); // a runExclusive whose fn still runs: detached, never released under it
      else lease.release().catch(() => {}); // tracked calls
    }
    // releases, and attempts still in flight (a late grant is released by its own call)
    await this.calls.drain(bound);
    const backend = this.backend;
    let closing: Promise<void>;
    try {
      closing = Promise.resolve(backend.close());
    } catch (e) {
      closing = Promise.reject(e);
    }
    const timedOut = Symbol('timed out');
    try {
      await race(closing, { ms: bound, onTimeout: () => timedOut });
    } catch (e) {
      // a backend that cannot say goodbye within opTimeout is left to finish on its own
      if (e !== timedOut) throw this.calls.error(e, 'close');
    }
  }

  /** Never the backend's clients or their options (passwords) at any depth. */
  [inspect.custom](): string {
    const state = this.closing.signal.aborted ? 'closed' : 'open';
    return `Locks { backend: '${this.backend.name}', prefix: '${this.prefix}', held: ${this.#held.size}, ${state} }`;
  }

  toJSON(): { backend: string; prefix: string; held: number } {
    return { backend: this.backend.name, prefix: this.prefix, held: this.#held.size };
  }
}
