/**
 * Renewal of every held lease of one backend: one timer, and one batched `extend` per tick for
 * all leases that are due (leases due within half an interval are renewed together), never a
 * timer per lease. A refused renewal marks the lease lost; a failed one is retried until the
 * lease's own monotonic deadline passes, and then it is lost.
 *
 * Leases that hang off a backend session (Redis session mode) are renewed by session instead: one
 * `renewSessions` call per tick for every due session, whatever the number of leases.
 *
 * A hung client cannot hold renewal up: a lease is marked lost at its deadline even while its
 * renewal is still in flight (the timer fires at the deadline of every lease and session, renewing
 * or not). A renewal call is given up after `opTimeout`, or once the last validity among its
 * leases (sessions) has passed if that is sooner (an answer after that renews nothing). A lease or
 * session that comes due while calls are in flight waits for them (and joins the next call: a call
 * answers in a round trip, so this is the common case and costs no extra call) until it is urgent
 * — a renewal interval of validity left, a full interval late — and is then sent at once in a call
 * of its own, so one hung call (a pool with one connection stuck, a slow Redlock node) costs only
 * the leases it carries. At most MAX_IN_FLIGHT renewal calls, per-lease and per-session together,
 * are in flight per Locks, so calls never pile up on a client that stopped answering: past that, a
 * lease waits for the first of them to be given up.
 */
import type { Backend } from './backend.js';
import type { Calls } from './calls.js';
import { channels, emit } from './events.js';
import { Group } from './keeper-group.js';
import type { LeaseImpl } from './lease.js';
import { now } from './wait.js';

/** The most renewal calls (per-lease and per-session together) in flight at once per Locks (see the header). */
const MAX_IN_FLIGHT = 4;

/** What is renewed: a lease, or a session (Group). */
interface Renewable {
  readonly expiresAt: number;
  readonly nextRenewAt: number;
  readonly renewInterval: number;
}

/** When a lease (session) waiting behind calls in flight that do not carry it is sent on its own (see the header). */
const urgentAt = (x: Renewable) => x.expiresAt - x.renewInterval;

export class Keeper {
  private readonly leases = new Set<LeaseImpl>();
  /** Leases that hang off a backend session, by session. */
  private readonly groups = new Map<string, Group>();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  /**
   * The tick, deferred from the timer to the next check phase: after a stall, Node runs the timers
   * that fell due before it reads the sockets, and a renewal's answer that arrived meanwhile must
   * be read before its lease is judged expired (as the deadlines of src/deadlines.ts do).
   */
  private immediate: NodeJS.Immediate | null = null;
  private readonly onTimer = () => {
    this.timer = null;
    this.timerAt = Infinity;
    if (this.immediate) return;
    // ref'd: an unref'd immediate waits for whatever wakes the loop next (it does not make the
    // poll phase return at once); it runs in this turn of the loop, so it never keeps a process up
    this.immediate = setImmediate(this.onImmediate);
  };
  private readonly onImmediate = () => {
    this.immediate = null;
    if (!this.stopped) this.tick();
  };
  private stopped = false;
  private seq = 0;
  /** Renewal calls in flight, per-lease and per-session (not yet settled or given up). */
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

  /** When the keeper must look at `g` next: as `nextTime` for a lease. */
  private groupTime(g: Group): number {
    return this.timeOf(g, !g.renewing);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = null;
    this.immediate = null;
    this.timerAt = Infinity;
  }

  /**
   * When the keeper must look at `l` next: its renewal (if one can be sent for it: none of ours,
   * nor a caller's extend(), is in flight for it, and `mayCall` says a call may be sent) or its
   * deadline.
   */
  private nextTime(l: LeaseImpl): number {
    return this.timeOf(l, this.mayRenew(l));
  }

  /** `nextTime` of a lease or a session; `may`: no call that carries it is in flight. */
  private timeOf(x: Renewable, may: boolean): number {
    if (!may || this.inFlight >= MAX_IN_FLIGHT) return x.expiresAt;
    // with calls in flight: looked at again once it is urgent (see mayCall)
    const at = this.inFlight === 0 ? x.nextRenewAt : Math.max(x.nextRenewAt, urgentAt(x));
    return Math.min(at, x.expiresAt);
  }

  private mayRenew(l: LeaseImpl): boolean {
    return l.renew && l.renewCall === 0 && !l.extending;
  }

  /**
   * Whether a renewal call may be sent for `x` (a lease, a session) at `t`: none was in flight
   * when this tick began (`busy`: the count then; a tick may send a per-lease and a per-session
   * call), or (fewer than MAX_IN_FLIGHT are) `x` is urgent — the calls in flight, which do not
   * carry it, have not answered in a whole renewal interval since it came due.
   */
  private mayCall(x: Renewable, t: number, busy: number): boolean {
    if (busy === 0) return true;
    return this.inFlight < MAX_IN_FLIGHT && t >= urgentAt(x);
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
    this.timer = setTimeout(this.onTimer, Math.max(0, Math.ceil(at - now()) + 1));
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
    const t = now();
    const busy = this.inFlight;
    const due: LeaseImpl[] = [];
    for (const l of [...this.leases]) {
      if (t >= l.expiresAt) {
        l.lose(l.expiredReason());
      } else if (this.mayRenew(l) && l.nextRenewAt - l.renewInterval / 2 <= t && this.mayCall(l, t, busy)) {
        due.push(l);
      }
    }
    if (due.length > 0) this.renew(due);
    const dueGroups: Group[] = [];
    for (const g of [...this.groups.values()]) {
      if (t >= g.expiresAt) {
        this.loseGroup(g, 'its session expired before a renewal succeeded');
      } else if (!g.renewing && g.nextRenewAt - g.renewInterval / 2 <= t && this.mayCall(g, t, busy)) {
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

  /**
   * One `renewSessions` call for every due session (one round trip, whatever the leases), bounded
   * as `renew`'s: by opTimeout, and never past the last validity among its sessions.
   */
  private renewGroups(due: Group[]): void {
    for (const g of due) g.renewing = true;
    const sentAt = now();
    let last = -Infinity;
    for (const g of due) last = Math.max(last, g.expiresAt);
    const ms = Math.min(this.calls.opTimeoutMs, Math.max(1, Math.ceil(last - sentAt) + 1));
    this.inFlight++;
    this.calls
      .run('renewal', () => this.backend.renewSessions!(due.map((g) => g.id)), { ms })
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
        this.inFlight--;
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
