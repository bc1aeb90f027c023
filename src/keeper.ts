/**
 * Renewal of every held lease of one backend: one timer, and one batched `extend` per tick for
 * all leases that are due (leases due within half an interval are renewed together), never a
 * timer per lease. A refused renewal marks the lease lost; a failed one is retried until the
 * lease's own monotonic deadline passes, and then it is lost.
 */
import type { Backend } from './backend.js';
import { channels, emit } from './events.js';
import type { LeaseImpl } from './lease.js';
import { now } from './wait.js';

export class Keeper {
  private readonly leases = new Set<LeaseImpl>();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private stopped = false;

  constructor(private readonly backend: Backend) {}

  /** Looks a held lease up by its backend key and token (session backends report loss by them). */
  find(fullKey: string, token: string): LeaseImpl | undefined {
    for (const l of this.leases) if (l.fullKey === fullKey && l.token === token) return l;
    return undefined;
  }

  add(lease: LeaseImpl): void {
    this.leases.add(lease);
    this.arm(this.nextTime(lease));
  }

  remove(lease: LeaseImpl): void {
    this.leases.delete(lease);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = Infinity;
  }

  private nextTime(l: LeaseImpl): number {
    return l.renew && !l.renewing ? Math.min(l.nextRenewAt, l.expiresAt) : l.expiresAt;
  }

  private arm(at: number): void {
    if (this.stopped || at >= this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => this.tick(), Math.max(0, at - now()));
    this.timer.unref();
  }

  private rearm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = Infinity;
    let next = Infinity;
    for (const l of this.leases) next = Math.min(next, this.nextTime(l));
    if (next < Infinity) this.arm(next);
  }

  private tick(): void {
    this.timer = null;
    this.timerAt = Infinity;
    const t = now();
    const due: LeaseImpl[] = [];
    for (const l of this.leases) {
      if (t >= l.expiresAt) {
        l.lose(l.renew ? 'it expired before a renewal succeeded' : 'its TTL ran out (renew is off)');
      } else if (l.renew && !l.renewing && l.nextRenewAt - l.renewInterval / 2 <= t) {
        due.push(l);
      }
    }
    if (due.length > 0) this.renew(due);
    this.rearm();
  }

  private renew(due: LeaseImpl[]): void {
    for (const l of due) l.renewing = true;
    const sentAt = now();
    const name = this.backend.name;
    let request: Promise<boolean[]>;
    try {
      request = this.backend.extend(due.map((l) => ({ key: l.fullKey, token: l.token, ttlMs: l.ttlMs })));
    } catch (e) {
      request = Promise.reject(e);
    }
    request
      .then(
        (results) => {
          due.forEach((l, i) => {
            l.renewing = false;
            const ok = results[i] === true;
            emit(channels.extend, { backend: name, key: l.key, fence: l.fence, ok, batch: due.length });
            if (ok) l.renewed(sentAt);
            else l.lose('renewal refused by the backend (expired, deleted or taken over)');
          });
        },
        (error: unknown) => {
          const t = now();
          for (const l of due) {
            l.renewing = false;
            emit(channels.extend, { backend: name, key: l.key, fence: l.fence, ok: false, batch: due.length, error });
            // retry soon, but never past the lease's own deadline (the tick then marks it lost)
            l.nextRenewAt = Math.min(l.expiresAt, t + Math.max(20, l.renewInterval / 4));
          }
        },
      )
      .finally(() => this.rearm());
  }
}
