/**
 * Renewal of every held lease of one backend: one timer, and one batched `extend` per tick for
 * all leases that are due (leases due within half an interval are renewed together), never a
 * timer per lease. A refused renewal marks the lease lost; a failed one is retried until the
 * lease's own monotonic deadline passes, and then it is lost.
 *
 * A hung client cannot hold renewal up: a lease is marked lost at its deadline even while its
 * renewal is still in flight (the timer fires at the deadline of every lease, renewing or not).
 * A renewal call is given up after `opTimeout`, or once the last validity among its leases has
 * passed if that is sooner (an answer after that renews nothing). A lease that comes due while
 * calls are in flight waits for them (and joins the next call: a call answers in a round trip,
 * so this is the common case and costs no extra call) until it is urgent — a renewal interval of
 * validity left, a full interval late — and is then sent at once in a call of its own, so one
 * hung call (a pool with one connection stuck, a slow Redlock node) costs only the leases it
 * carries. At most MAX_IN_FLIGHT renewal calls are in flight per Locks, so calls never pile up on
 * a client that stopped answering: past that, a lease waits for the first of them to be given up.
 */
import type { Backend } from './backend.js';
import type { Calls } from './calls.js';
import { channels, emit } from './events.js';
import { driftMs, type LeaseGroup, type LeaseImpl } from './lease.js';
import { now } from './wait.js';

/** The most per-lease renewal calls in flight at once per Locks (see the header). */
const MAX_IN_FLIGHT = 4;

/** When a lease waiting behind calls in flight that do not carry it is sent on its own (see the header). */
const urgentAt = (l: LeaseImpl) => l.expiresAt - l.renewInterval;

/**
 * The leases that hang off one backend session (Grant.session): renewed by one
 * `renewSessions` entry for all of them, never one by one; lost together when it lapses.
 */
class Group implements LeaseGroup {
  readonly leases = new Map<string, LeaseImpl>(); // token → lease
  expiresAt = -Infinity;
  nextRenewAt = Infinity;
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

export class Keeper {
  private readonly leases = new Set<LeaseImpl>();
  /** Leases that hang off a backend session, by session. */
  private readonly groups = new Map<string, Group>();
  /** The session renewal in flight, if any. */
  private groupBusy: number | null = null;
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private stopped = false;
  private seq = 0;
  /** Renewal calls in flight (not yet settled or given up). */
  private inFlight = 0;

  constructor(
    private readonly backend: Backend,
    private readonly calls: Calls,
  ) {}

  /**
   * Tracks a lease; `session` (its Grant's) puts a renewed lease in its session's group, when
   * the backend renews sessions. `sentAt`: when the acquire that granted it was sent.
   */
  add(lease: LeaseImpl, session?: string, sentAt?: number): void {
    if (session !== undefined && lease.renew && this.backend.renewSessions && sentAt !== undefined) {
      let g = this.groups.get(session);
      if (!g) {
        g = new Group(session, lease.ttlMs);
        this.groups.set(session, g);
      }
      if (g.ttlMs === lease.ttlMs) {
        g.leases.set(lease.token, lease);
        lease.group = g;
        g.renewed(sentAt); // the grant set the session's expiry to its TTL
        this.arm(this.groupTime(g));
        return;
      }
    }
    this.leases.add(lease);
    this.arm(this.nextTime(lease));
  }

  remove(lease: LeaseImpl): void {
    const g = lease.group as Group | null;
    if (g) {
      if (g.leases.get(lease.token) === lease) g.leases.delete(lease.token);
      // an empty group is forgotten: its session lapses unless a new lease renews it
      if (g.leases.size === 0 && this.groups.get(g.id) === g) this.groups.delete(g.id);
      return;
    }
    this.leases.delete(lease);
  }

  /** The lease leaves its session's group and is renewed by itself (its own expiry). */
  ungroup(lease: LeaseImpl): void {
    const g = lease.group;
    if (!g) return;
    const until = g.expiresAt;
    this.remove(lease);
    lease.group = null;
    lease.expiresAt = until;
    lease.nextRenewAt = Math.min(lease.nextRenewAt, until);
    this.leases.add(lease);
    this.arm(this.nextTime(lease));
  }

  private groupTime(g: Group): number {
    return !g.renewing && this.groupBusy === null ? Math.min(g.nextRenewAt, g.expiresAt) : g.expiresAt;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = Infinity;
  }

  /**
   * When the keeper must look at `l` next: its renewal (if one can be sent for it: none of ours,
   * nor a caller's extend(), is in flight for it, and `mayCall` says a call may be sent) or its
   * deadline.
   */
  private nextTime(l: LeaseImpl): number {
    if (!this.mayRenew(l) || this.inFlight >= MAX_IN_FLIGHT) return l.expiresAt;
    // with calls in flight: looked at again once it is urgent (see mayCall)
    const at = this.inFlight === 0 ? l.nextRenewAt : Math.max(l.nextRenewAt, urgentAt(l));
    return Math.min(at, l.expiresAt);
  }

  private mayRenew(l: LeaseImpl): boolean {
    return l.renew && l.renewCall === 0 && !l.extending;
  }

  /**
   * Whether a renewal call may be sent for `l` at `t`: none is in flight, or (fewer than
   * MAX_IN_FLIGHT are) `l` is urgent — the calls in flight, which do not carry it, have not
   * answered in a whole renewal interval since it came due.
   */
  private mayCall(l: LeaseImpl, t: number): boolean {
    if (this.inFlight === 0) return true;
    return this.inFlight < MAX_IN_FLIGHT && t >= urgentAt(l);
  }

  /** The lease's expiry or renewal time changed (an explicit extend): its timer follows. */
  reschedule(lease: LeaseImpl): void {
    if (this.leases.has(lease)) this.arm(this.nextTime(lease));
  }

  private arm(at: number): void {
    if (this.stopped || at >= this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    // +1: a timer may fire up to a millisecond before performance.now() reaches `at`
    this.timer = setTimeout(() => this.tick(), Math.max(0, Math.ceil(at - now()) + 1));
    this.timer.unref();
  }

  private rearm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = Infinity;
    let next = Infinity;
    for (const l of this.leases) next = Math.min(next, this.nextTime(l));
    for (const g of this.groups.values()) next = Math.min(next, this.groupTime(g));
    if (next < Infinity) this.arm(next);
  }

  private tick(): void {
    this.timer = null;
    this.timerAt = Infinity;
    const t = now();
    const due: LeaseImpl[] = [];
    for (const l of [...this.leases]) {
      if (t >= l.expiresAt) {
        l.lose(l.expiredReason());
      } else if (this.mayRenew(l) && l.nextRenewAt - l.renewInterval / 2 <= t && this.mayCall(l, t)) {
        due.push(l);
      }
    }
    if (due.length > 0) this.renew(due);
    const dueGroups: Group[] = [];
    for (const g of [...this.groups.values()]) {
      if (t >= g.expiresAt) {
        this.loseGroup(g, 'its session expired before a renewal succeeded');
      } else if (this.groupBusy === null && !g.renewing && g.nextRenewAt - g.renewInterval / 2 <= t) {
        dueGroups.push(g);
      }
    }
    if (dueGroups.length > 0) this.renewGroups(dueGroups);
    this.rearm();
  }

  /** One `leasehold:extend` event per lease of the group (only while someone listens: it costs per lease). */
  private emitGroup(g: Group, ok: boolean, error?: unknown): void {
    if (!channels.extend.hasSubscribers) return;
    const name = this.backend.name;
    for (const l of [...g.leases.values()]) {
      const m = { backend: name, key: l.key, fence: l.fence, ok, batch: g.leases.size };
      emit(channels.extend, error === undefined ? m : { ...m, error });
    }
  }

  private loseGroup(g: Group, reason: string, cause?: unknown): void {
    if (this.groups.get(g.id) === g) this.groups.delete(g.id);
    for (const l of [...g.leases.values()]) l.lose(reason, cause);
    g.leases.clear();
  }

  /** One `renewSessions` call for every due session (one round trip, whatever the leases). */
  private renewGroups(due: Group[]): void {
    const id = ++this.seq;
    this.groupBusy = id;
    for (const g of due) g.renewing = true;
    const sentAt = now();
    this.calls
      .run('renewal', () => this.backend.renewSessions!(due.map((g) => g.id)), {})
      .then(
        (results) => {
          due.forEach((g, i) => {
            g.renewing = false;
            const r = results[i];
            if (!r?.ok) {
              this.emitGroup(g, false);
              this.loseGroup(g, 'its backend session lapsed (not renewed in time, or ended)');
              return;
            }
            g.nextRenewAt = Infinity;
            g.renewed(sentAt);
            for (const token of r.lost) {
              const l = g.leases.get(token);
              if (!l) continue;
              if (channels.extend.hasSubscribers) {
                emit(channels.extend, { backend: this.backend.name, key: l.key, fence: l.fence, ok: false, batch: 1 });
              }
              l.lose('renewal refused by the backend (expired, deleted or taken over)');
            }
            this.emitGroup(g, true);
          });
        },
        (error: unknown) => {
          const t = now();
          for (const g of due) {
            this.emitGroup(g, false, error);
            g.renewing = false;
            // retry soon, but never past the session's deadline (the tick then marks its leases lost)
            g.nextRenewAt = Math.min(g.expiresAt, t + Math.max(20, g.renewInterval / 4));
          }
        },
      )
      .finally(() => {
        if (this.groupBusy === id) this.groupBusy = null;
        this.rearm();
      });
  }

  private renew(due: LeaseImpl[]): void {
    const id = ++this.seq;
    for (const l of due) l.renewCall = id;
    // each lease's TTL as sent, and the call's place in its order of sends (see LeaseImpl.sending)
    const items = due.map((l) => ({ key: l.fullKey, token: l.token, ttlMs: l.ttlMs }));
    const sentAt = now();
    const seqs = due.map((l) => l.sending(sentAt, l.ttlMs).seq);
    // bounded by opTimeout, and never past the last validity among its leases: an answer after that
    // renews nothing, and the leases renewed after it (acquired since) must not wait for it
    let last = -Infinity;
    for (const l of due) last = Math.max(last, l.expiresAt);
    const ms = Math.min(this.calls.opTimeoutMs, Math.max(1, Math.ceil(last - sentAt) + 1));
    this.inFlight++;
    const name = this.backend.name;
    // false if the lease is no longer part of this call (it joined a later one)
    const done = (l: LeaseImpl) => {
      if (l.renewCall !== id) return false;
      l.renewCall = 0;
      return true;
    };
    // this lease's renewal failed, its outcome unknown: said, and retried soon, but never past the
    // lease's own deadline (the tick then marks it lost)
    const retry = (l: LeaseImpl, error: unknown, t: number) => {
      emit(channels.extend, { backend: name, key: l.key, fence: l.fence, ok: false, batch: due.length, error });
      l.nextRenewAt = Math.min(l.expiresAt, t + Math.max(20, l.renewInterval / 4));
    };
    this.calls
      .run('renewal', () => this.backend.extend(items), {
        ms,
        secrets: due.map((l) => l.token),
      })
      .then(
        (results) => {
          const t = now();
          due.forEach((l, i) => {
            const mine = done(l);
            const r = results[i];
            // this item failed while others of the call went through (Backend.extend): its error
            // is scrubbed as a whole call's is (a client's error may quote the token)
            if (r instanceof Error) {
              l.unanswered();
              if (mine) retry(l, this.calls.error(r, 'renewal', [l.token], l.key), t);
              return;
            }
            const ok = r === true;
            if (channels.extend.hasSubscribers) {
              emit(channels.extend, { backend: name, key: l.key, fence: l.fence, ok, batch: due.length });
            }
            if (ok) l.renewed(seqs[i]!, items[i]!.ttlMs);
            else l.lose('renewal refused by the backend (expired, deleted or taken over)');
          });
        },
        (error: unknown) => {
          const t = now();
          for (const l of due) {
            l.unanswered();
            if (done(l)) retry(l, error, t);
          }
        },
      )
      .finally(() => {
        this.inFlight--;
        this.rearm();
      });
  }
}
