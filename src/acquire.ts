/**
 * Acquiring: the fast path (one attempt, no timer or signal set up beyond the call's own bound),
 * the slow path (local FIFO turn, then pauses and attempts until the `wait` deadline), and
 * `tryAcquire`. Every attempt is a bounded call (src/calls.ts): it settles by the deadline, the
 * call's `opTimeout`, the lease's validity, or at once on abort and `close()`; a grant that
 * arrives after the caller gave up is released, and a waiter that gave up leaves the queue.
 * A waiting acquire outlives a failing backend: a `QuorumError` (a multi-node backend could not
 * reach a majority for now: a partition, a stall) and a transient `BackendError` (a dropped
 * connection, a failover, a call past `opTimeout`: src/transient.ts) are retried with a jittered
 * backoff until the deadline, whose LockTimeoutError then carries the last failure as `cause`;
 * any other error (a read-only file, a refused permission) fails the acquire at once. After a BackendError the attempt may
 * or may not have run on the server, so the wait goes on under a fresh token, and the old one is
 * given back (it leaves the queue, and a grant it got is released, token-checked) before the next
 * attempt: a late answer to the failed attempt can never be mistaken for the new one's.
 */
import type { Backend, Grant } from './backend.js';
import type { CallOptions, Calls } from './calls.js';
import { after, cancel } from './deadlines.js';
import { BackendError, LockTimeoutError } from './errors.js';
import { channels, emit, warn } from './events.js';
import { driftOf } from './lease.js';
import { GiveBack, retryable, type Failure } from './give-back.js';
import { newToken } from './validate.js';
import { anySignal, backoffDelay, LinkedSignal, now, race, sleep, TurnQueue, type Backoff } from './wait.js';

/** Why a pause ended early: a local lease on its key settled (never surfaced to a caller). */
const KICKED = Symbol('leasehold: kicked');

export interface Parsed {
  key: string;
  fullKey: string;
  ttlMs: number;
  renew: boolean;
  waitMs: number;
  signal: AbortSignal | undefined;
  value: string | undefined;
}

/** What acquiring needs from its Locks. */
export interface AcquireHost {
  readonly backend: Backend;
  readonly calls: Calls;
  readonly retry: Backoff;
  /** Aborted with a ClosedError by `close()`. */
  readonly closingSignal: AbortSignal;
  /** A grant the caller still wants becomes a lease. */
  grant(p: Parsed, token: string, g: Grant, sentAt: number, waitedMs: number, attempts: number): unknown;
}

export class Acquirer {
  private readonly turns = new TurnQueue();
  private readonly kicks = new Map<string, LinkedSignal>();
  /** Per key: this process's leases that have not settled yet (each one kicks once). */
  private readonly local = new Map<string, number>();
  /**
   * A wait's controller over `close()` alone (no caller's signal), kept by the wait that ends
   * without aborting it for the next one: a waiter waits once per grant, and a new controller
   * with its listener on the close signal was ~1/5 of a hand-over's client CPU in steady state
   * (bench/handoff-local.ts, best of 3: 129 → 104 µs per grant).
   * Every listener a wait adds to it leaves before that wait ends.
   */
  private spare: LinkedSignal | null = null;

  /** What attempts given up on leave behind, given back (give-back.ts). */
  private readonly back: GiveBack;

  constructor(private readonly host: AcquireHost) {
    this.back = new GiveBack(host);
  }

  /** A lease on `fullKey` was granted here: it kicks the key's waiter when it settles. */
  held(fullKey: string): void {
    this.local.set(fullKey, (this.local.get(fullKey) ?? 0) + 1);
  }

  /** Someone in this process may take `fullKey` now (a lease on it settled). */
  kick(fullKey: string): void {
    const n = this.local.get(fullKey) ?? 0;
    if (n > 1) this.local.set(fullKey, n - 1);
    else this.local.delete(fullKey);
    // a constant reason: a pause ends quietly, and abort() without one builds a DOMException
    this.kicks.get(fullKey)?.abort(KICKED);
  }

  /**
   * One acquire attempt, bounded. Given up on its way, it is given back once it settles (not before
   * it reached the server): a late grant is released, a late refusal leaves the queue, a late error both.
   */
  private attempt(
    p: Parsed,
    token: string,
    queue: boolean,
    ms: number,
    signal: AbortSignal | undefined,
    closable: boolean,
    onTimeout?: () => unknown,
  ): Promise<Grant | null> {
    const { backend, calls } = this.host;
    const o: CallOptions<Grant | null> = { key: p.key, ms, signal, closable, onTimeout, secrets: [token] };
    // assigned, not a property of the literal: no function name to define per attempt under keepNames
    o.late = (g) => {
      if (g) return this.back.giveBack(p, token);
      if (queue && backend.leave) return this.back.leave(p, token);
    };
    o.lateError = () => this.back.abandon(p, token, queue);
    return calls.run(
      'acquire',
      () => backend.acquire(p.fullKey, { token, ttlMs: p.ttlMs, queue, value: p.value, renew: p.renew }),
      o,
    );
  }

  /** The driver's `handedOver` (no I/O); null when it has none, knows of none, or throws. */
  private handedOver(p: Parsed, token: string): Grant | null {
    const { backend } = this.host;
    if (!backend.handedOver) return null;
    try {
      return backend.handedOver(p.fullKey, { token, ttlMs: p.ttlMs, queue: true, value: p.value, renew: p.renew });
    } catch {
      return null;
    }
  }

  /** An attempt whose retryable failure is returned rather than thrown: the wait retries it. */
  private async attemptOrFailure(...args: Parameters<Acquirer['attempt']>): Promise<Grant | null | Failure> {
    try {
      return await this.attempt(...args);
    } catch (e) {
      if (retryable(e)) return e;
      throw e;
    }
  }

  /** Says (once per wait, when someone listens) that the backend fails and the wait retries. */
  private warnFailing(p: Parsed, e: Failure): boolean {
    return warn({
      code: 'LEASEHOLD_BACKEND_FAILING',
      key: p.key,
      message: `acquire of "${p.key}": ${e.message}; retrying until its wait deadline`,
    });
  }

  /** The longest an attempt may take: a grant later than the lease's validity is already void. */
  private validity(p: Parsed): number {
    return Math.max(1, p.ttlMs - driftOf(this.host.backend, p.ttlMs));
  }

  async acquire(p: Parsed, token: string): Promise<unknown> {
    const started = now();
    if (this.turns.busy(p.fullKey)) return this.wait(p, token, started, false);
    // fast path: nobody local is ahead of us; one attempt before any timer or signal is set up
    this.turns.takeNow(p.fullKey);
    let waiting = false;
    try {
      const { calls } = this.host;
      // at least one attempt is made, even with wait: 0; a positive wait bounds it too
      const ms = Math.min(calls.opTimeoutMs, this.validity(p), p.waitMs > 0 ? p.waitMs : Infinity);
      const byWait = p.waitMs > 0 && p.waitMs <= Math.min(calls.opTimeoutMs, this.validity(p));
      const onTimeout = byWait ? () => new LockTimeoutError(p.key, now() - started) : undefined;
      let g: Grant | null;
      try {
        g = await this.attempt(p, token, true, ms, p.signal, true, onTimeout);
      } catch (e) {
        // one attempt was all it could have (wait: 0, or its deadline has passed): as it failed
        if (!retryable(e) || p.signal?.aborted || now() - started >= p.waitMs) throw this.back.failed(p, token, e);
        waiting = true;
        return await this.wait(p, token, started, true, e);
      }
      if (g) return this.granted(p, token, g, started, started, 1);
      waiting = true;
      return await this.wait(p, token, started, true);
    } finally {
      if (!waiting) this.turns.pass(p.fullKey);
    }
  }

  /** A grant arrived: unless the caller gave up meanwhile, it becomes a lease. */
  private granted(p: Parsed, token: string, g: Grant, sentAt: number, started: number, attempts: number): unknown {
    const closing = this.host.closingSignal;
    if (p.signal?.aborted || closing.aborted) {
      void this.back.giveBack(p, token); // not awaited: the caller is told at once
      throw p.signal?.aborted ? p.signal.reason : closing.reason;
    }
    return this.host.grant(p, token, g, sentAt, now() - started, attempts);
  }

  /**
   * The slow path: wait for the local turn (unless `hasTurn`: then the first attempt was refused
   * and we are queued at the backend), then alternate pauses and attempts until the deadline.
   * When the last attempt failed (a QuorumError, a BackendError), the LockTimeoutError carries
   * that failure as `cause`.
   */
  private async wait(p: Parsed, token: string, started: number, hasTurn: boolean, failure?: Failure): Promise<unknown> {
    const { backend, calls, closingSignal } = this.host;
    const left = Math.max(0, p.waitMs - (now() - started));
    // one controller for the caller's signal, close() and the deadline (which aborts it directly)
    let all: LinkedSignal;
    if (p.signal) all = anySignal([p.signal, closingSignal]);
    else if (this.spare !== null && !this.spare.signal.aborted) {
      all = this.spare;
      this.spare = null;
    } else all = anySignal([closingSignal]);
    const timer = after(left, () => all.abort(new LockTimeoutError(p.key, now() - started)));
    let queued = hasTurn;
    /** Tokens of attempts that failed with a BackendError, not yet given back. */
    let stale: string[] | null = null;
    let warned = false;
    let inFlight = false; // an attempt under `token` is on its way
    if (failure) {
      // the fast path's attempt failed
      warned = this.warnFailing(p, failure);
      if (failure instanceof BackendError) {
        stale = [token];
        token = newToken();
      }
    }
    let outcome: 'acquired' | 'timeout' | 'aborted' | 'error' = 'error';
    if (channels.wait.hasSubscribers) emit(channels.wait, { backend: backend.name, key: p.key, phase: 'start' });
    try {
      if (!hasTurn) await this.turns.take(p.fullKey, all.signal);
      try {
        for (let attempt = hasTurn ? 2 : 1; ; attempt++) {
          if (queued) {
            if (all.signal.aborted) throw all.signal.reason;
            await this.pause(p, all.signal, attempt - 1, failure !== undefined);
          }
          if (all.signal.aborted) throw all.signal.reason;
          if (stale !== null && stale.length > 0) {
            const e = await this.back.sweep(p, stale, all.signal);
            if (e) {
              failure = e; // still failing: pause, then give back again
              queued = true;
              continue;
            }
          }
          const sentAt = now();
          // a grant a release handed to us while we paused, known without a round trip
          const handed = queued ? this.handedOver(p, token) : null;
          if (handed) {
            const lease = this.granted(p, token, handed, sentAt, started, attempt);
            outcome = 'acquired';
            return lease;
          }
          // bounded by the caller's signal, the deadline and close() (all three in `all`)
          const ms = Math.min(calls.opTimeoutMs, this.validity(p));
          inFlight = true;
          const g = await this.attemptOrFailure(p, token, true, ms, all.signal, false);
          inFlight = false;
          if (g === null || !retryable(g)) {
            if (g !== null) {
              const lease = this.granted(p, token, g, sentAt, started, attempt);
              outcome = 'acquired';
              return lease;
            }
            failure = undefined;
          } else {
            failure = g;
            if (!warned) warned = this.warnFailing(p, g);
            if (g instanceof BackendError) {
              // the attempt may have queued or been granted under `token`: the wait goes on under
              // a new one, and the old one is given back first
              (stale ??= []).push(token);
              token = newToken();
            }
          }
          queued = true;
        }
      } finally {
        this.turns.pass(p.fullKey);
      }
    } catch (e) {
      outcome = e instanceof LockTimeoutError ? 'timeout' : all.signal.aborted ? 'aborted' : 'error';
      // our place in the queue, unless an attempt was abandoned on its way: it may reach the server
      // after a leave sent now, so it leaves (and releases) once it settled (`attempt`)
      const abandoned = inFlight && all.signal.aborted && e === all.signal.reason;
      if (queued && backend.leave && !abandoned) void this.back.leave(p, token);
      // tokens of failed attempts not given back yet: in the background (tracked: close() waits)
      if (stale !== null) for (const t of stale) this.back.abandonLater(p, t);
      throw e instanceof LockTimeoutError && failure ? new LockTimeoutError(p.key, e.waitedMs, { cause: failure }) : e;
    } finally {
      cancel(timer);
      if (!p.signal && !all.signal.aborted && this.spare === null) this.spare = all;
      else all.dispose();
      if (channels.wait.hasSubscribers) {
        emit(channels.wait, { backend: backend.name, key: p.key, phase: 'end', waitedMs: now() - started, outcome });
      }
    }
  }

  /**
   * Waits for a push wake-up (or a local release), else — or after a failed attempt (`backoff`) —
   * for a jittered backoff; never past `signal`.
   */
  private async pause(p: Parsed, signal: AbortSignal, attempt: number, backoff = false): Promise<void> {
    // aborted by `signal`, or by a kick (a local lease on the key settled): a controller of its
    // own only while such a lease exists (none can be granted meanwhile: this wait holds the
    // key's local turn), so a waiter on another process's lock allocates none
    const both = this.local.has(p.fullKey) ? anySignal([signal]) : null;
    if (both) this.kicks.set(p.fullKey, both);
    const s = both ? both.signal : signal;
    const { backend } = this.host;
    try {
      if (backend.waitForChange && !backoff) {
        // bounded so a waiter refreshes its place in a fair queue and survives a missed message
        const maxMs = Math.max(1, Math.floor(p.ttlMs / 3));
        let wait: Promise<void>;
        try {
          wait = backend.waitForChange(p.fullKey, s, maxMs);
        } catch {
          wait = sleep(maxMs, s);
        }
        // the engine enforces the contract: a driver stuck on a hung client cannot hold us
        await race(wait, { ms: maxMs + 10, signal: s }).catch(() => {});
      } else {
        await sleep(backoffDelay(this.host.retry, attempt - 1), s);
      }
    } finally {
      if (both) {
        both.dispose();
        if (this.kicks.get(p.fullKey) === both) this.kicks.delete(p.fullKey);
      }
    }
  }

  async tryAcquire(p: Parsed, token: string): Promise<unknown> {
    // someone in this process is already acquiring this key: one attempt would fail anyway
    if (this.turns.busy(p.fullKey)) return null;
    this.turns.takeNow(p.fullKey);
    try {
      const sentAt = now();
      const ms = Math.min(this.host.calls.opTimeoutMs, this.validity(p));
      let g: Grant | null;
      try {
        g = await this.attempt(p, token, false, ms, p.signal, true);
      } catch (e) {
        throw this.back.failed(p, token, e);
      }
      if (!g) return null;
      return this.granted(p, token, g, sentAt, sentAt, 1);
    } finally {
      this.turns.pass(p.fullKey);
    }
  }
}
