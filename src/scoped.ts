/**
 * Runs under a lock, for Locks (locks.ts): `withLock` (acquire, run, release; a lease lost or
 * closed under the work, or a lock its release finds gone, is reported after it) and
 * `runExclusive` (tryAcquire, run at most once at a time, and keep the lock for the rest of a
 * `lockAtLeastFor` window: handed over to the backend's store, or extended on the server; a lease
 * lost under the work — past lockAtMostFor, a window refused, or with no window a release that
 * finds the lock gone — is reported after it, as withLock's). `close()` never releases a
 * runExclusive lock whose function still runs: it is left to its stored expiry (`lockAtMostFor`),
 * as after a crash.
 */
import type { Backend } from './backend.js';
import type { Calls } from './calls.js';
import { toMs, type Duration } from './duration.js';
import { ClosedError, InvalidArgumentError, LeaseLostError } from './errors.js';
import { checkTtl, MIN_TTL_MS, type Lease, type LeaseImpl } from './lease.js';
import { checkKey, checkOptions, checkSignal } from './validate.js';
import { now } from './wait.js';

export interface RunExclusiveOptions {
  /** Keep the lock at least this long from the grant, even if `fn` finishes sooner (default 0). */
  lockAtLeastFor?: Duration;
  /** The lock's TTL: it is never held longer, even if the process dies (default: the Locks' ttl). */
  lockAtMostFor?: Duration;
  signal?: AbortSignal;
}

export type RunExclusiveResult<T> = { ran: true; value: T } | { ran: false };

/** What the runs need of Locks; `A` is its acquire options, passed through by withLock. */
export interface ScopedHost<A> {
  readonly backend: Backend;
  readonly calls: Calls;
  readonly closingSignal: AbortSignal;
  /** The Locks' default ttl (runExclusive's default lockAtMostFor). */
  readonly ttlMs: number;
  acquire(key: string, options?: A): Promise<Lease>;
  tryAcquire(key: string, options?: { ttl?: Duration; renew?: boolean; signal?: AbortSignal }): Promise<Lease | null>;
  /** `close()` calls `onClose` instead of releasing `lease` while it is pinned. */
  pin(lease: LeaseImpl, onClose: () => void): void;
  unpin(lease: LeaseImpl): void;
}

const EXCLUSIVE_OPTS = ['lockAtLeastFor', 'lockAtMostFor', 'signal'] as const;

export async function withLock<T, A>(
  host: ScopedHost<A>,
  key: string,
  fn: (lease: Lease) => Promise<T> | T,
  options?: A,
): Promise<T> {
  if (typeof fn !== 'function') throw new InvalidArgumentError('withLock: fn must be a function');
  const lease = (await host.acquire(key, options)) as LeaseImpl;
  let value: T;
  try {
    value = await fn(lease);
  } catch (e) {
    await quietRelease(lease);
    throw e;
  }
  // `held` first: it marks a lease past its validity lost now, even when fn stalled the event
  // loop past the TTL and no timer has run since (`lostError` alone would miss that)
  const held = lease.held;
  const lost = held ? null : lease.lostError;
  const closedUnder = !held && !lost && lease.state !== 'held' && host.closingSignal.aborted;
  // a lock deleted or taken over under a short fn, before any renewal noticed: the release finds it gone
  const gone = await checkedRelease(host, lease);
  // the work finished, but not under the lock the whole time: the caller must know
  if (lost) throw lost;
  if (closedUnder) throw new ClosedError();
  if (gone) throw gone;
  return value;
}

export async function runExclusive<T, A>(
  host: ScopedHost<A>,
  key: string,
  fn: (lease: Lease) => Promise<T> | T,
  options?: RunExclusiveOptions,
): Promise<RunExclusiveResult<T>> {
  checkKey(key);
  if (typeof fn !== 'function') throw new InvalidArgumentError('runExclusive: fn must be a function');
  const o = checkOptions<RunExclusiveOptions>(options, EXCLUSIVE_OPTS, 'runExclusive');
  const atMost =
    o.lockAtMostFor === undefined
      ? host.ttlMs
      : checkTtl(toMs(o.lockAtMostFor, 'lockAtMostFor'), 'runExclusive: a lockAtMostFor');
  const atLeast = o.lockAtLeastFor === undefined ? 0 : toMs(o.lockAtLeastFor, 'lockAtLeastFor', { allowZero: true });
  if (atLeast > atMost) throw new InvalidArgumentError('lockAtLeastFor must not exceed lockAtMostFor');
  const signal = checkSignal(o.signal, 'runExclusive');
  const lease = (await host.tryAcquire(key, { ttl: atMost, renew: false, signal })) as LeaseImpl | null;
  if (!lease) return { ran: false };
  // while fn runs, close() detaches the lease rather than release it (another instance would run
  // the job at once, beside this one): the lock lasts until its stored expiry, as after a crash
  let running = true;
  let closedUnder = false;
  host.pin(lease, () => {
    if (running) closedUnder = detachOnClose(host, lease, atMost); // else the window's own call is in flight
  });
  if (lease.state !== 'held' && host.closingSignal.aborted) {
    host.unpin(lease); // close() came between the grant and here, and released it: fn never ran
    throw new ClosedError();
  }
  let value: T;
  let lost: LeaseLostError | ClosedError | null;
  try {
    value = await fn(lease);
  } finally {
    running = false;
    // `held` first, as in withLock: it marks a lease past its validity lost now, even when fn
    // stalled the event loop past lockAtMostFor (the lease is never renewed) and no timer ran
    lost = lease.held ? null : lease.lostError;
    // a lost lease keeps no window (keepWindow only releases what is left); a window whose
    // extend or keep is refused tells us the lock was no longer ours
    lost = (await keepWindow(host, lease, atLeast)) ?? lost;
    host.unpin(lease);
  }
  // fn finished, but close() ended its lease under it (the lock is kept until lockAtMostFor)
  if (closedUnder) throw new ClosedError();
  // fn finished, but not under the lock the whole time: another instance may have run the job
  // beside it (run at most once at a time was not kept), so the caller must know, as withLock's
  if (lost) throw lost;
  return { ran: true, value };
}

/**
 * `close()` while fn runs: the lease is detached, not released; its stored expiry (lockAtMostFor,
 * the lease is never renewed) ends it. A backend whose locks end with their session at close()
 * (`keep`) stores it for the rest of lockAtMostFor first (its session's own validity, which bounds
 * the lease's, ends with close()). False if the lease was not held.
 */
function detachOnClose(host: ScopedHost<unknown>, lease: LeaseImpl, atMost: number): boolean {
  const left = lease.remaining(); // 0 when it ran out: then it is lost, and released as such
  if (lease.state !== 'held') return false;
  const ms = Math.max(left, Math.floor(lease.grantedAt + atMost - now()));
  lease.detach();
  if (ms >= 1 && host.backend.keep) void keepCall(host, lease, ms).catch(() => {}); // tracked: close() waits
  return true;
}

/**
 * After fn: the rest of the `lockAtLeastFor` window is kept (it outlives close()), or the lock
 * released. A window refused by the server (the token no longer holds the lock: expired, deleted
 * or taken over) marks the lease lost, and that LeaseLostError is returned; an error of the call
 * tells nothing of the lock: an extend's leaves it to its stored expiry (never sooner than the
 * window's end), a session backend's `keep`'s releases it.
 */
async function keepWindow(
  host: ScopedHost<unknown>,
  lease: LeaseImpl,
  atLeast: number,
): Promise<LeaseLostError | ClosedError | null> {
  const keep = Math.floor(atLeast - (now() - lease.grantedAt));
  // nothing (more) to keep: released, and a lock found gone at the release is a lost lease too
  if (keep < 1 || lease.state !== 'held') return checkedRelease(host, lease);
  // the stored expiry keeps the window: it outlives close() and a crash
  try {
    const kept = host.backend.keep ? await keepCall(host, lease, keep) : await extendWindow(host, lease, keep);
    if (kept) {
      lease.detach();
      return null;
    }
    // lose() marks it lost and gives it back (a token-checked release) if it is still held
    lease.lose(
      'the lock was no longer held when its lockAtLeastFor window was to be kept (expired, deleted or taken over)',
    );
    return lease.lostError;
  } catch {
    // the call failed, its outcome unknown. An extend either went through (the window) or not
    // (lockAtMostFor from the grant): both keep the lock until the window ends, so it is left to
    // its stored expiry, as after a crash; a release would let another instance run inside the
    // window. A session backend's lock ends with its session: released, as before.
    if (host.backend.keep) await quietRelease(lease);
    else lease.detach();
    return null;
  }
}

/** Hands the lock over to the backend's store for `ms` (session backends). */
function keepCall(host: ScopedHost<unknown>, lease: LeaseImpl, ms: number): Promise<boolean> {
  const backend = host.backend;
  return host.calls.run('keep', () => backend.keep!(lease.fullKey, lease.token, ms), {
    key: lease.key,
    secrets: [lease.token],
  });
}

/**
 * Keeps the lock for the rest of the window by a token-checked extend on the server; the lease
 * is detached after it, so its own validity no longer matters (lease.extend would refuse a
 * window of 1–2 ms, and take one confirmed after its validity for lost, and release it). A
 * window shorter than MIN_TTL_MS is rounded up to it: kept a millisecond or two longer, never
 * given up early.
 */
async function extendWindow(host: ScopedHost<unknown>, lease: LeaseImpl, ms: number): Promise<boolean> {
  const backend = host.backend;
  const item = { key: lease.fullKey, token: lease.token, ttlMs: Math.max(ms, MIN_TTL_MS) };
  const [ok] = await host.calls.run('extend', () => backend.extend([item]), {
    key: lease.key,
    secrets: [lease.token],
  });
  return ok === true;
}

/**
 * Releases the lease after fn. A LeaseLostError when the lease was held (by what this process
 * knew) and the token-checked release found the lock no longer its token's: expired, deleted or
 * taken over under fn, before any renewal or expiry noticed (another process may have run beside
 * fn). Null otherwise: released; not held any more (lost, released or detached: told elsewhere);
 * a release that threw (its outcome unknown: the lock runs out by its TTL); or one that `close()`
 * may have ended first (a session backend whose session it ends). A ClosedError when the backend
 * itself was closed under fn (its release refuses: a session backend's close ended the lock).
 */
async function checkedRelease(
  host: ScopedHost<unknown>,
  lease: LeaseImpl,
): Promise<LeaseLostError | ClosedError | null> {
  if (lease.state !== 'held') {
    await quietRelease(lease);
    return null;
  }
  let released: boolean;
  try {
    released = await lease.release();
  } catch (e) {
    // the backend was closed under fn (not the Locks: see closingSignal): the lock was not taken
    // from the caller, but a session backend's close() ended it before fn returned
    if (e instanceof ClosedError) return e;
    return null; // reported on the leasehold:release channel; the lock runs out by its TTL
  }
  if (released || host.closingSignal.aborted) return null;
  // (release() marks a lease whose validity just ran out lost, and returns false without a call)
  return (
    lease.lostError ??
    new LeaseLostError(lease.key, 'the lock was no longer held when it was released (expired, deleted or taken over)')
  );
}

async function quietRelease(lease: LeaseImpl): Promise<void> {
  try {
    await lease.release();
  } catch {
    // reported on the leasehold:release channel; the lock runs out by its TTL
  }
}
