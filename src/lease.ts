/** Lease: one grant of one key to one holder. */
import { inspect, type InspectOptions } from 'node:util';
import type { Backend } from './backend.js';
import type { Calls } from './calls.js';
import { InvalidArgumentError, LeaseLostError } from './errors.js';
import { channels, emit } from './events.js';
import { toMs, type Duration } from './duration.js';
import { now } from './wait.js';

export interface Lease extends AsyncDisposable {
  /** The key as the caller named it (without the prefix). */
  readonly key: string;
  /** The holder's secret (≥128 random bits). Never log it. */
  readonly token: string;
  /** Fencing token: strictly increasing per key across holders. Send it with every write. */
  readonly fence: bigint;
  /** Aborted with a LeaseLostError when the lease is lost, or a plain abort on release. */
  readonly signal: AbortSignal;
  /**
   * True while the lease is ours, as far as this process knows. Reading it past the lease's
   * validity marks the lease lost (so `held` and `signal` never disagree).
   */
  readonly held: boolean;
  /** Whole milliseconds left by this process's monotonic clock, minus a drift margin; 0 once lost. */
  remaining(): number;
  /** Token-checked extension (to `ttl`, default the lease's TTL). Throws LeaseLostError if lost. */
  extend(ttl?: Duration): Promise<void>;
  /**
   * Token-checked release. False if the lease was no longer ours; never retries a lost lease. A
   * release that threw (its call failed: the lock may still be ours) is sent again by the next call.
   */
  release(): Promise<boolean>;
}

/** What a lease needs from the Locks that made it. */
export interface LeaseHost {
  readonly backend: Backend;
  /** Bounded, tracked backend calls. */
  readonly calls: Calls;
  untrack(lease: LeaseImpl): void;
  /** Called once the lock may be free again (released, lost, detached). */
  settled(lease: LeaseImpl): void;
  /** A lease that hangs off a session is about to get its own expiry (an explicit extend). */
  ungroup?(lease: LeaseImpl): void;
  /**
   * The lease's expiry or renewal time changed outside the keeper (an explicit extend settled):
   * its timer is armed again for the new times.
   */
  rescheduled?(lease: LeaseImpl): void;
}

/** A backend session as the engine renews it: one renewal for all of its leases. */
export interface LeaseGroup {
  readonly id: string;
  readonly ttlMs: number;
  /** Monotonic time at which the session (and every lease of it) runs out for us. */
  expiresAt: number;
}

/** The margin subtracted from a lease's validity: 1% of the TTL plus 2ms (as Redlock does). */
export const driftMs = (ttlMs: number): number => Math.floor(ttlMs * 0.01) + 2;

/** The drift allowance of a lease on `backend`: the engine's, or the backend's own if larger. */
export const driftOf = (backend: Pick<Backend, 'driftMs'>, ttlMs: number): number =>
  Math.max(driftMs(ttlMs), backend.driftMs?.(ttlMs) ?? 0);

/** The smallest ttl that leaves any validity after driftMs (3 ms). */
export const MIN_TTL_MS = 3;

/**
 * Refuses (before any I/O) a TTL that leaves no validity after the drift allowance: a lease of it
 * would be lost before the caller could use it. `what` names the option: 'acquire: a ttl'.
 */
export function checkTtl(ttlMs: number, what: string): number {
  if (ttlMs - driftMs(ttlMs) <= 0) {
    throw new InvalidArgumentError(
      `${what} of ${ttlMs}ms leaves no validity after the drift allowance of ${driftMs(ttlMs)}ms ` +
        `(1% of the ttl + 2ms); use at least ${MIN_TTL_MS}ms`,
    );
  }
  return ttlMs;
}

type State = 'held' | 'lost' | 'released';

export class LeaseImpl implements Lease {
  /** Created on first use of `signal`: most leases never need one. */
  #ctrl: AbortController | null = null;
  /** Private (not an own enumerable property): spreading, `Object.entries` or JSON never see it. */
  readonly #token: string;
  #state: State = 'held';
  /** Monotonic time at which the lease runs out for us (validity minus drift), unless it hangs off a session. */
  #expiresAt = 0;
  /**
   * The backend session this lease hangs off (Grant.session), renewed once for all of its
   * leases: while set, the lease runs out when the session does.
   */
  group: LeaseGroup | null = null;
  /** Monotonic time of the next renewal (when `renew`). */
  nextRenewAt: number;
  /** The keeper's renewal call this lease is part of while it is in flight (0: none). */
  renewCall = 0;
  ttlMs: number;
  /**
   * Calls that set the lease's expiry on the server (renewals, extends), numbered in the order
   * they were sent; `#applied` is the latest-sent one that succeeded (its TTL is the lease's from
   * then on). Calls in flight at the same time may be applied by the server in any order (a driver
   * with several connections), and whichever is applied last sets the expiry: so from the first
   * send until none is in flight, the lease believes the soonest expiry any of them can leave
   * (`#soonest`), and is renewed before it (`#renewBy`).
   */
  #sent = 0;
  #applied = 0;
  #inFlight = 0;
  #soonest = Infinity;
  #renewBy = Infinity;
  /** The caller's extend() calls in flight: the keeper sends no renewal meanwhile. */
  #extending = 0;
  #lostError: LeaseLostError | null = null;
  /** The ttl of an extend() in flight that shortened the expiry (0: none). */
  #shortening = 0;
  /** The last release call failed (its outcome unknown): a later release() sends it again. */
  #releaseFailed = false;

  /** Private (not an own property): a deep walk of a lease never reaches the Locks or its clients. */
  readonly #host: LeaseHost;

  constructor(
    host: LeaseHost,
    readonly key: string,
    readonly fullKey: string,
    token: string,
    readonly fence: bigint,
    ttlMs: number,
    readonly renew: boolean,
    /** Monotonic time just before the acquire that granted it was sent. */
    readonly grantedAt: number,
  ) {
    this.#host = host;
    this.#token = token;
    this.ttlMs = ttlMs;
    this.expiresAt = grantedAt + ttlMs - this.#drift(ttlMs);
    this.nextRenewAt = grantedAt + this.renewInterval;
  }

  /** The drift allowance of a call setting this lease's expiry to `ttlMs` (the backend's, if larger). */
  #drift(ttlMs: number): number {
    return driftOf(this.#host.backend, ttlMs);
  }

  /** A third of the TTL, or half the validity when a backend's large drift leaves less than that. */
  #renewAfter(ttlMs: number): number {
    return Math.max(1, Math.min(Math.floor(ttlMs / 3), Math.floor((ttlMs - this.#drift(ttlMs)) / 2)));
  }

  /**
   * The server holds this grant only until `t` (a hand-over's claim) until its first renewal:
   * the lease is valid until then, and renewed before half of what is left has passed.
   */
  claimedUntil(t: number): void {
    if (t >= this.#ownExpiry) return;
    this.expiresAt = t;
    const n = now();
    this.nextRenewAt = Math.min(this.nextRenewAt, n + Math.max(0, (t - n) / 2));
  }

  get token(): string {
    return this.#token;
  }
  /** The lease's validity, bounded by what its backend's session still guarantees (Backend.validUntil). */
  get expiresAt(): number {
    const own = this.#ownExpiry;
    const { backend } = this.#host;
    if (!backend.validUntil) return own;
    let bound: number | undefined;
    try {
      bound = backend.validUntil(this.fullKey, this.#token);
    } catch {
      bound = undefined; // the contract says it never throws; a broken driver must not break `held`
    }
    return typeof bound === 'number' && bound < own ? bound : own;
  }
  /** The validity by the lease's (or its group's) own renewals, before the backend's bound. */
  get #ownExpiry(): number {
    return this.group ? this.group.expiresAt : this.#expiresAt;
  }
  set expiresAt(t: number) {
    this.#expiresAt = t;
  }
  get renewInterval(): number {
    return this.#renewAfter(this.ttlMs);
  }
  /** Marks a lease past its validity lost now (a paused process may read it before any timer ran). */
  #checkExpiry(): void {
    if (this.#state === 'held' && now() >= this.expiresAt) this.lose(this.expiredReason());
  }
  /** Why the lease is lost once its validity passed: an extension's own, when it shortened it. */
  expiredReason(): string {
    const t = this.#shortening;
    if (t)
      return `the extension to ${t}ms ran out before it was confirmed (${t - this.#drift(t)}ms of validity after the drift allowance)`;
    return this.renew ? 'it expired before a renewal succeeded' : 'its TTL ran out (renew is off)';
  }
  get signal(): AbortSignal {
    this.#checkExpiry();
    if (!this.#ctrl) {
      this.#ctrl = new AbortController();
      if (this.#state === 'lost') this.#ctrl?.abort(this.#lostError);
      else if (this.#state === 'released') this.#ctrl?.abort();
    }
    return this.#ctrl.signal;
  }
  get held(): boolean {
    this.#checkExpiry();
    return this.#state === 'held';
  }
  get lostError(): LeaseLostError | null {
    return this.#lostError;
  }
  get state(): State {
    return this.#state;
  }

  remaining(): number {
    this.#checkExpiry();
    return this.#state === 'held' ? Math.max(0, Math.floor(this.expiresAt - now())) : 0;
  }

  /** True while an extend() of the caller is in flight: the keeper leaves the lease alone then. */
  get extending(): boolean {
    return this.#extending > 0;
  }

  /**
   * A call setting the expiry to `ttlMs` (a renewal, an extend) is sent at `sentAt`: its number, for
   * `renewed`. The server may apply it at once: if it leaves a sooner expiry than ours (a shorter
   * ttl), the lease believes that now, before any answer, and is renewed before it (`lowered`).
   */
  sending(sentAt: number, ttlMs: number): { seq: number; lowered: boolean } {
    if (this.#inFlight++ === 0) this.#soonest = this.#renewBy = Infinity;
    const until = sentAt + ttlMs - this.#drift(ttlMs);
    const renewAt = sentAt + this.#renewAfter(ttlMs);
    this.#soonest = Math.min(this.#soonest, until);
    this.#renewBy = Math.min(this.#renewBy, renewAt);
    const lowered = !this.group && until < this.#expiresAt;
    if (lowered) {
      this.#expiresAt = until;
      this.nextRenewAt = Math.min(this.nextRenewAt, renewAt);
    }
    return { seq: ++this.#sent, lowered };
  }

  /**
   * The call sent as number `seq` (of `sending()`) with `ttlMs` succeeded: the server applied it.
   * The lease's expiry is the soonest any call in flight with it can leave (see `#soonest`); the
   * TTL is this call's unless one sent after it already succeeded. False if the lease is not held.
   */
  renewed(seq: number, ttlMs: number): boolean {
    this.#inFlight--;
    if (this.#state !== 'held') return false;
    if (seq > this.#applied) {
      this.#applied = seq;
      this.ttlMs = ttlMs;
    }
    this.#expiresAt = this.#soonest;
    this.nextRenewAt = this.#renewBy;
    return true;
  }

  /** A call failed unanswered (an error, a timeout): it may have been applied; the expiry stays as `sending` left it. */
  unanswered(): void {
    this.#inFlight--;
  }

  async extend(ttl?: Duration): Promise<void> {
    // the lease would be over before the extension even went out: no backend call
    const ttlMs = ttl === undefined ? this.ttlMs : checkTtl(toMs(ttl, 'ttl'), 'extend: a ttl');
    if (this.#state === 'released')
      throw new InvalidArgumentError(`lease on "${this.key}" was released; acquire a new one`);
    this.#checkExpiry();
    if (this.state === 'lost') throw this.#lostError!;
    if (this.group) this.#host.ungroup?.(this); // from now on it is renewed by itself
    // the keeper sends no renewal while this is in flight: one sent after it would be applied
    // last, with the old TTL, while we would believe this one's
    this.#extending++;
    try {
      await this.#extend(ttlMs);
    } finally {
      this.#extending--;
      this.#shortening = 0;
      // renewals resume on the (possibly new) schedule, and the deadline timer follows the expiry
      if (this.#state === 'held') this.#host.rescheduled?.(this);
    }
  }

  async #extend(ttlMs: number): Promise<void> {
    const { backend, calls } = this.#host;
    const sentAt = now();
    const { seq, lowered } = this.sending(sentAt, ttlMs);
    if (lowered) {
      this.#shortening = ttlMs;
      this.#host.rescheduled?.(this); // the deadline timer follows the sooner expiry now
    }
    let ok: boolean | undefined;
    try {
      // bounded by opTimeout, and never past the lease's own validity (as lowered): then it is lost
      const ms = Math.min(calls.opTimeoutMs, Math.max(1, Math.ceil(this.expiresAt - sentAt) + 1));
      const [r] = await calls.run('extend', () => backend.extend([{ key: this.fullKey, token: this.#token, ttlMs }]), {
        key: this.key,
        ms,
        closable: true,
        secrets: [this.#token],
      });
      // a single item rejects (Backend.extend), scrubbed as a whole call's error is; never counted as extended
      if (r instanceof Error) throw calls.error(r, 'extend', [this.#token], this.key);
      ok = r;
    } catch (e) {
      this.unanswered();
      this.#emitExtend(false, e);
      this.#checkExpiry();
      if (this.#lostError) throw this.#lostError;
      throw e;
    }
    // the extension's own validity, by our clock from its send: over already when the answer came?
    const until = sentAt + ttlMs - this.#drift(ttlMs);
    const answeredAt = now();
    const late = answeredAt >= until;
    this.#emitExtend(!!ok && !late);
    if (!ok || late) {
      this.lose(
        late
          ? `the extension to ${ttlMs}ms ran out before it was confirmed (answered after ${Math.round(answeredAt - sentAt)}ms; ` +
              `${ttlMs - this.#drift(ttlMs)}ms of validity after the drift allowance)`
          : 'the backend refused the extension (expired, deleted or taken over)',
      );
      throw this.#lostError ?? new LeaseLostError(this.key, 'released during extend');
    }
    if (!this.renewed(seq, ttlMs)) throw this.#lostError ?? new LeaseLostError(this.key, 'released during extend');
  }

  #emitExtend(ok: boolean, error?: unknown): void {
    if (!channels.extend.hasSubscribers) return;
    const m = { backend: this.#host.backend.name, key: this.key, fence: this.fence, ok, batch: 1 };
    emit(channels.extend, error === undefined ? m : { ...m, error });
  }

  async release(): Promise<boolean> {
    // a release whose call failed (its outcome unknown): the lock may still be ours, so it is tried
    // again, token-checked, rather than answered false ("no longer ours") without a call
    if (this.#state === 'released' && this.#releaseFailed) return this.#release();
    this.#checkExpiry(); // one that ran out during a stall is lost (LeaseLostError), not released
    if (this.#state !== 'held') return false;
    this.#state = 'released';
    this.#host.untrack(this);
    this.#ctrl?.abort();
    try {
      return await this.#release();
    } finally {
      this.#host.settled(this); // once: a retry of a failed release settles nothing more
    }
  }

  /** The token-checked release call; `#releaseFailed` says whether it must be tried again. */
  async #release(): Promise<boolean> {
    const { backend, calls } = this.#host;
    try {
      const released = await calls.run('release', () => backend.release(this.fullKey, this.#token), {
        key: this.key,
        secrets: [this.#token],
      });
      this.#releaseFailed = false;
      if (channels.release.hasSubscribers) {
        emit(channels.release, { backend: backend.name, key: this.key, fence: this.fence, released });
      }
      return released;
    } catch (e) {
      this.#releaseFailed = true;
      emit(channels.release, { backend: backend.name, key: this.key, fence: this.fence, released: false, error: e });
      throw e;
    }
  }

  /**
   * Marks the lease lost: `held` false, signal aborted with LeaseLostError, a `leasehold:lost`
   * event. Best-effort token-checked release so a session backend gives its connection back.
   */
  lose(reason: string, cause?: unknown): void {
    if (this.#state !== 'held') return;
    this.#state = 'lost';
    const safe = cause === undefined ? undefined : this.#host.calls.error(cause, 'renewal', [this.#token]);
    this.#lostError = new LeaseLostError(this.key, reason, safe === undefined ? undefined : { cause: safe });
    this.#host.untrack(this);
    emit(channels.lost, { backend: this.#host.backend.name, key: this.key, fence: this.fence, reason, cause: safe });
    this.#ctrl?.abort(this.#lostError);
    const { backend, calls } = this.#host;
    calls
      .run('release', () => backend.release(this.fullKey, this.#token), { key: this.key, secrets: [this.#token] })
      .catch(() => false)
      .finally(() => this.#host.settled(this));
  }

  /** Stops tracking without releasing: the stored expiry keeps the lock (runExclusive). */
  detach(): void {
    if (this.#state !== 'held') return;
    this.#state = 'released';
    this.#host.untrack(this);
    this.#ctrl?.abort();
    this.#host.settled(this); // a local waiter attempts again (and learns how long the window lasts)
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** What JSON shows: never the token. */
  toJSON(): { key: string; fence: string; held: boolean; remainingMs: number } {
    return { key: this.key, fence: this.fence.toString(), held: this.#isHeld(), remainingMs: this.#left() };
  }

  /** What `util.inspect` and `console.log` show, at any depth: never the token, nor the client. */
  [inspect.custom](_depth: number, options: InspectOptions): string {
    const shown = { key: this.key, fence: this.fence, held: this.#isHeld(), remainingMs: this.#left() };
    return `Lease ${inspect(shown, { ...options, depth: 1 })}`;
  }

  // side-effect free views for inspect/JSON (reading them must not change the lease)
  #isHeld(): boolean {
    return this.#state === 'held' && now() < this.expiresAt;
  }
  #left(): number {
    return this.#isHeld() ? Math.floor(this.expiresAt - now()) : 0;
  }
}
