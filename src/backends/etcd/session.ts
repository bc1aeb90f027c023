/**
 * The liveness of one backend: one etcd lease, kept alive by the client (etcd3's keep-alive
 * stream, every TTL/3), with a watchdog of our own. etcd3 reports a lease lost only after two
 * TTLs without an answer, which is long after the server freed its keys; the watchdog declares
 * the session dead as soon as no keep-alive has been confirmed for one TTL (counted from when
 * the confirmed keep-alive was *sent*, by the monotonic clock, minus a margin). A dead session
 * never comes back: the backend opens a new one for later acquires.
 */
import type { Lease, Namespace } from 'etcd3';
import { BackendError } from '../../errors.js';
import { markTransient } from '../../transient.js';

/** Declared dead this long before the last confirmed keep-alive runs out (clock rate, scheduling). */
const marginMs = (ttlMs: number): number => Math.floor(ttlMs * 0.02) + 50;

export class Session {
  /** The lease id (decimal string), once granted. */
  id = '';
  dead = false;
  cause: unknown = null;
  private confirmedUntil: number;
  private fired: number[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly lease: Lease;
  private readonly deaths = new Set<(cause: unknown) => void>();

  private constructor(
    client: Namespace,
    private ttlMs: number,
    sentAt: number,
  ) {
    this.confirmedUntil = sentAt + ttlMs;
    this.lease = client.lease(Math.ceil(ttlMs / 1000), { autoKeepAlive: true });
    this.lease.on('lost', (e: unknown) => this.die(e ?? markTransient(new BackendError('etcd: lease lost'))));
    this.lease.on('keepaliveEstablished', () => (this.fired = []));
    this.lease.on('keepaliveFired', () => this.fired.push(performance.now()));
    this.lease.on('keepaliveSucceeded', (res: { TTL?: string }) => {
      const sent = this.fired.shift();
      const ttl = Number(res?.TTL);
      // a lease the server no longer has answers TTL 0, which arrives as a missing field (proto3
      // default), so etcd3 (which looks for '0') takes it for a success: it is the end of it
      if (!(ttl > 0))
        return this.die(markTransient(new BackendError('etcd: the lease expired or was revoked on the server')));
      if (sent === undefined) return;
      this.ttlMs = ttl * 1000;
      this.confirmedUntil = Math.max(this.confirmedUntil, sent + this.ttlMs);
    });
  }

  /** Grants a lease of `ttlMs` (rounded up to whole seconds; etcd may raise it to its minimum). */
  static async open(client: Namespace, ttlMs: number): Promise<Session> {
    const s = new Session(client, ttlMs, performance.now());
    try {
      s.id = String(await s.lease.grant());
    } catch (e) {
      s.die(e);
      throw new BackendError(`etcd: could not grant a lease: ${(e as Error)?.message ?? String(e)}`, { cause: e });
    }
    if (!s.dead) s.arm();
    return s;
  }

  onDeath(cb: (cause: unknown) => void): void {
    if (this.dead) cb(this.cause);
    else this.deaths.add(cb);
  }

  /**
   * Monotonic time until which a confirmed keep-alive guarantees the lease (the confirmed one's
   * send time + TTL, minus the margin); -Infinity once dead. Nothing held under it is valid later.
   */
  get validUntil(): number {
    return this.dead ? -Infinity : this.confirmedUntil - marginMs(this.ttlMs);
  }

  /** True while a keep-alive confirmed within the TTL says the lease is alive. */
  get alive(): boolean {
    return performance.now() < this.validUntil;
  }

  private arm(): void {
    if (this.dead) return;
    const at = this.confirmedUntil - marginMs(this.ttlMs);
    this.timer = setTimeout(
      () => {
        this.timer = null;
        if (this.dead) return;
        if (performance.now() >= this.confirmedUntil - marginMs(this.ttlMs)) {
          this.die(markTransient(new BackendError('etcd: no keep-alive of the lease was confirmed within its TTL')));
        } else this.arm();
      },
      Math.max(0, Math.ceil(at - performance.now()) + 1),
    );
    this.timer.unref();
  }

  /** Marks the session dead (once): stops the keep-alive and tells who asked. */
  die(cause: unknown): void {
    if (this.dead) return;
    this.dead = true;
    this.cause = cause;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.lease.release(); // stops the keep-alive; the server frees our keys at its own expiry
    for (const cb of this.deaths) {
      try {
        cb(cause);
      } catch {
        // one listener's failure must not stop the others
      }
    }
    this.deaths.clear();
  }

  /** Revokes the lease (every key under it goes at once) and ends the session. */
  async revoke(): Promise<void> {
    const wasDead = this.dead;
    this.die(new BackendError('etcd: the lease was revoked by close()'));
    if (wasDead && !this.id) return;
    await this.lease.revoke();
  }
}
