/** The keeper's (keeper.ts) view of one backend session: the leases that hang off it. */
import { driftMs, type LeaseGroup, type LeaseImpl } from './lease.js';

/**
 * The leases that hang off one backend session (Grant.session): renewed by one
 * `renewSessions` entry for all of them, never one by one; lost together when it lapses.
 */
export class Group implements LeaseGroup {
  readonly leases = new Map<string, LeaseImpl>(); // token → lease
  expiresAt = -Infinity;
  nextRenewAt = Infinity;
  /** A renewal call that carries this session is in flight. */
  renewing = false;
  constructor(
    readonly id: string,
    readonly ttlMs: number,
  ) {}
  get renewInterval(): number {
    return Math.max(1, Math.floor(this.ttlMs / 3));
  }
  /** The session's expiry was set to its TTL by a call sent at `sentAt`. */
  renewed(sentAt: number): void {
    this.expiresAt = Math.max(this.expiresAt, sentAt + this.ttlMs - driftMs(this.ttlMs));
    this.nextRenewAt = Math.min(this.nextRenewAt, sentAt + this.renewInterval);
  }
}
