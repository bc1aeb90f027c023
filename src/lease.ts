/** Lease: one grant of one key to one holder. */
import type { Backend } from './backend.js';
import { BackendError, InvalidArgumentError, LeaseLostError } from './errors.js';
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
  /** True while the lease is ours, as far as this process knows. */
  readonly held: boolean;
  /** Milliseconds left by this process's monotonic clock, minus a drift margin; 0 once lost. */
  remaining(): number;
  /** Token-checked extension (to `ttl`, default the lease's TTL). Throws LeaseLostError if lost. */
  extend(ttl?: Duration): Promise<void>;
  /** Token-checked release. False if the lease was no longer ours; never retries a lost lease. */
  release(): Promise<boolean>;
}

/** What a lease needs from the Locks that made it. */
export interface LeaseHost {
  readonly backend: Backend;
  track(lease: LeaseImpl): void;
  untrack(lease: LeaseImpl): void;
  /** Called once the lock may be free again (released, lost, detached). */
  settled(lease: LeaseImpl): void;
}

/** The margin subtracted from a lease's validity: 1% of the TTL plus 2ms (as Redlock does). */
export const driftMs = (ttlMs: number): number => Math.floor(ttlMs * 0.01) + 2;

type State = 'held' | 'lost' | 'released';

export class LeaseImpl implements Lease {
  /** Created on first use of `signal`: most leases never need one. */
  #ctrl: AbortController | null = null;
  #state: State = 'held';
  /** Monotonic time at which the lease runs out for us (validity minus drift). */
  expiresAt: number;
  /** Monotonic time of the next renewal (when `renew`). */
  nextRenewAt: number;
  /** A renewal is in flight. */
  renewing = false;
  ttlMs: number;
  #lostError: LeaseLostError | null = null;

  constructor(
    private readonly host: LeaseHost,
    readonly key: string,
    readonly fullKey: string,
    readonly token: string,
    readonly fence: bigint,
    ttlMs: number,
    readonly renew: boolean,
    /** Monotonic time just before the acquire that granted it was sent. */
    readonly grantedAt: number,
  ) {
    this.ttlMs = ttlMs;
    this.expiresAt = grantedAt + ttlMs - driftMs(ttlMs);
    this.nextRenewAt = grantedAt + this.renewInterval;
  }

  get renewInterval(): number {
    return Math.max(1, Math.floor(this.ttlMs / 3));
  }
  get signal(): AbortSignal {
    if (!this.#ctrl) {
      this.#ctrl = new AbortController();
      if (this.#state === 'lost') this.#ctrl?.abort(this.#lostError);
      else if (this.#state === 'released') this.#ctrl?.abort();
    }
    return this.#ctrl.signal;
  }
  get held(): boolean {
    return this.#state === 'held' && now() < this.expiresAt;
  }
  get lostError(): LeaseLostError | null {
    return this.#lostError;
  }
  get state(): State {
    return this.#state;
  }

  remaining(): number {
    return this.#state === 'held' ? Math.max(0, this.expiresAt - now()) : 0;
  }

  /** A renewal sent at monotonic time `sentAt` succeeded. */
  renewed(sentAt: number): void {
    if (this.#state !== 'held') return;
    this.expiresAt = Math.max(this.expiresAt, sentAt + this.ttlMs - driftMs(this.ttlMs));
    this.nextRenewAt = sentAt + this.renewInterval;
  }

  async extend(ttl?: Duration): Promise<void> {
    const ttlMs = ttl === undefined ? this.ttlMs : toMs(ttl, 'ttl');
    if (this.#state === 'released')
      throw new InvalidArgumentError(`lease on "${this.key}" was released; acquire a new one`);
    if (this.#state === 'lost' || now() >= this.expiresAt) {
      this.lose('expired before it was extended');
      throw this.#lostError!;
    }
    const sentAt = now();
    let ok: boolean | undefined;
    try {
      [ok] = await this.host.backend.extend([{ key: this.fullKey, token: this.token, ttlMs }]);
    } catch (e) {
      emit(channels.extend, {
        backend: this.host.backend.name,
        key: this.key,
        fence: this.fence,
        ok: false,
        batch: 1,
        error: e,
      });
      throw e instanceof BackendError ? e : new BackendError(`extend of "${this.key}" failed`, { cause: e });
    }
    emit(channels.extend, { backend: this.host.backend.name, key: this.key, fence: this.fence, ok: !!ok, batch: 1 });
    if (!ok) {
      this.lose('the backend refused the extension (expired, deleted or taken over)');
      throw this.#lostError!;
    }
    if (this.#state !== 'held') throw this.#lostError ?? new LeaseLostError(this.key, 'released during extend');
    this.ttlMs = ttlMs;
    this.expiresAt = sentAt + ttlMs - driftMs(ttlMs);
    this.nextRenewAt = sentAt + this.renewInterval;
  }

  async release(): Promise<boolean> {
    if (this.#state !== 'held') return false;
    this.#state = 'released';
    this.host.untrack(this);
    this.#ctrl?.abort();
    const backend = this.host.backend;
    try {
      const released = await backend.release(this.fullKey, this.token);
      emit(channels.release, { backend: backend.name, key: this.key, fence: this.fence, released });
      return released;
    } catch (e) {
      emit(channels.release, { backend: backend.name, key: this.key, fence: this.fence, released: false, error: e });
      throw e instanceof BackendError ? e : new BackendError(`release of "${this.key}" failed`, { cause: e });
    } finally {
      this.host.settled(this);
    }
  }

  /**
   * Marks the lease lost: `held` false, signal aborted with LeaseLostError, a `leasehold:lost`
   * event. Best-effort token-checked release so a session backend gives its connection back.
   */
  lose(reason: string, cause?: unknown): void {
    if (this.#state !== 'held') return;
    this.#state = 'lost';
    this.#lostError = new LeaseLostError(this.key, reason, cause === undefined ? undefined : { cause });
    this.host.untrack(this);
    emit(channels.lost, { backend: this.host.backend.name, key: this.key, fence: this.fence, reason, cause });
    this.#ctrl?.abort(this.#lostError);
    this.host.backend
      .release(this.fullKey, this.token)
      .catch(() => false)
      .finally(() => this.host.settled(this));
  }

  /** Stops tracking without releasing: the stored expiry keeps the lock (runExclusive). */
  detach(): void {
    if (this.#state !== 'held') return;
    this.#state = 'released';
    this.host.untrack(this);
    this.#ctrl?.abort();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
