/**
 * The locks the session backend (session.ts) holds, from grant to end: each one's expiry (its
 * TTL is the holder's validity), the liveness probe that extends it, its release (or its
 * runExclusive window, `keep`), and its loss. A failure of the connection a lock is on loses
 * every lease on that connection at once; a statement on it that fails or times out in a way
 * that leaves its state unknown fails the session the same way (destroyed, its server session
 * terminated in case it is only half-open). A held lock's shape and what these need from the
 * backend (`Held`, `LeasesHost`) are held.ts's.
 */
import type { AcquireRequest, ExtendItem, Grant, LostCallback } from '../../backend.js';
import { BackendError, ClosedError } from '../../errors.js';
import { backendError, timed, type Conn, type Row } from './client.js';
import { TransactionPoolerError, sqlState } from './connect.js';
import { newHeld, type Held, type LeasesHost } from './held.js';
import { lockParts } from './keys.js';
import type { Wait } from './queue.js';
import { terminateHolder } from './reads.js';
import { markTransient } from '../../transient.js';

/** `classid:objid`, as pg_locks shows the lock. */
const part = (lockKey: string) => {
  const { classid, objid } = lockParts(BigInt(lockKey));
  return `${classid}:${objid}`;
};

export class Leases {
  readonly held = new Map<string, Held>();
  readonly lost = new Set<LostCallback>();

  constructor(private readonly host: LeasesHost) {}

  /** The lock of `key` while `token` holds it, or undefined. */
  holding(key: string, token: string): Held | undefined {
    const h = this.held.get(key);
    if (!h || h.token !== token || h.state !== 'held') return undefined;
    return h;
  }

  /** True while a lease of the backend is held on `conn`. */
  holdsOn(conn: Conn): boolean {
    for (const h of this.held.values()) if (h.conn === conn) return true;
    return false;
  }

  /**
   * The answer of a lock statement: a fence (decimal digits: granted), 'held' or `w<ms>` (a
   * window); a moved or restarted session throws (`inFlight`: a lock the statement left held
   * there, for which the session's server process is ended).
   */
  checkRow(conn: Conn, row: Row | undefined, inFlight: string | null = null): string {
    const r = row?.r;
    if (typeof r === 'string' && r.length > 0) {
      const c = r.charCodeAt(0);
      if ((c >= 48 && c <= 57) || r === 'held' || c === 119) return r;
    }
    if (r === 'sequence') {
      // re-created twice in a row under this connection (nothing was locked): the session is fine
      throw markTransient(new BackendError('postgres: the fence sequence was re-created during the acquire'));
    }
    if (r === 'moved') {
      const e = new TransactionPoolerError('a statement on the lock connection ran on another server session');
      this.host.dedicated.pooled = e;
      this.fail(conn, e, inFlight);
      throw e;
    }
    // another server start than the one whose epoch this connection read: never grant on it
    const e = markTransient(new BackendError('postgres: the server restarted under the lock connection'));
    this.fail(conn, e, inFlight);
    throw e;
  }

  /** A lock this session got: a lease, unless it came too late or the backend closed meanwhile. */
  async granted(held: Held, request: AcquireRequest, calledAt: number): Promise<Grant | null> {
    const { key, conn } = held;
    this.held.set(key, held);
    this.host.windowOver(key);
    // a grant that arrives after its own validity (a starved process) is void: let it go
    const late = performance.now() >= calledAt + request.ttlMs - Math.floor(request.ttlMs * 0.01) - 2;
    if (late && !this.host.closed() && !conn.closed) {
      await this.unlock(held);
      return null;
    }
    if (this.host.closed()) {
      if (!conn.closed) await this.unlock(held);
      this.held.delete(key);
      throw new ClosedError('postgres: backend closed');
    }
    if (conn.closed) {
      // the session of this grant ended before it was claimed (a waiter connection): no lock
      if (this.held.get(key) === held) this.held.delete(key);
      return null;
    }
    this.expireAt(held, calledAt + request.ttlMs, calledAt, request.ttlMs);
    this.host.rows.add(held, request.value ?? null);
    // a holder value (an election's leader) is visible to everyone once the grant resolves
    if (request.value !== undefined) await this.host.rows.flush(key);
    return { fence: held.fence };
  }

  /** A granted wait becomes a lease of the caller whose attempt claims it. */
  claim(w: Wait, request: AcquireRequest, calledAt: number): Promise<Grant | null> {
    return this.granted(this.takeWait(w, request.token), request, calledAt);
  }

  /**
   * A granted wait becomes the caller's lease at once, with no statement (`handedOver`, in
   * session.ts, checked that it needs no I/O: no holder value, backend and connection open).
   */
  handedOver(key: string, w: Wait, request: AcquireRequest): Grant {
    const held = this.takeWait(w, request.token);
    this.held.set(key, held);
    this.host.windowOver(key);
    const now = performance.now();
    this.expireAt(held, now + request.ttlMs, now, request.ttlMs);
    this.host.rows.add(held, null);
    return { fence: held.fence };
  }

  /** A granted wait ends; its lock is the caller's from now on (on the waiter connection). */
  private takeWait(w: Wait, token: string): Held {
    this.host.queue.take(w);
    return newHeld(w.key, token, w.lockKey, w.fence, w.conn!);
  }

  /** The liveness probe: one statement per session connection, whatever the number of leases. */
  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    const out = items.map(() => false);
    const byConn = new Map<Conn, number[]>();
    items.forEach((item, i) => {
      const h = this.held.get(item.key);
      if (!h || h.token !== item.token || h.state !== 'held' || h.conn.closed) return;
      const list = byConn.get(h.conn);
      if (list) list.push(i);
      else byConn.set(h.conn, [i]);
    });
    await Promise.all([...byConn].map(([conn, idx]) => this.probe(conn, items, idx, out)));
    return out;
  }

  /**
   * One statement on `conn` for the leases `idx` of `items`: each one still held is extended to
   * its TTL from the send time (`refresh`: its validity stays, only the keepalive bound moves).
   * It raises the connection's keepalive idle time to the longest TTL when lower (keepalive.ts).
   */
  private async probe(
    conn: Conn,
    items: readonly ExtendItem[],
    idx: number[],
    out: boolean[],
    refresh = false,
  ): Promise<void> {
    const ttls = idx.map((i) => items[i]!.ttlMs);
    const ms = Math.min(this.host.timeoutMs, Math.max(Math.floor(Math.min(...ttls) / 3), 200));
    const idle = this.host.keepalives.need(conn, Math.max(...ttls));
    const sentAt = performance.now();
    let rows: Row[];
    try {
      rows = await timed(conn.prepared(this.host.sql.heldHere, [idle]), ms, 'liveness probe');
    } catch (e) {
      this.fail(conn, e);
      return;
    }
    if (Number(rows[0]?.pid) !== this.host.pids.get(conn)) {
      // the session's statements now run on another server connection (a pooler that does not
      // keep sessions): what it holds there is not ours to count on. Every lease on it is lost
      // at once, the session that holds them is ended, and session locks are refused from now on
      const e = new TransactionPoolerError('a liveness probe on the lock connection ran on another server session');
      this.host.dedicated.pooled = e;
      this.fail(conn, e);
      return;
    }
    this.host.keepalives.set(conn, idle);
    const k = rows[0]?.k;
    const here = new Set(typeof k === 'string' ? k.split(' ') : []);
    const gone = new BackendError('postgres: the session no longer holds the advisory lock');
    for (const i of idx) {
      const h = this.held.get(items[i]!.key);
      if (!h || h.conn !== conn || h.state !== 'held') continue;
      if (here.has(part(h.lockKey))) {
        const ttl = items[i]!.ttlMs;
        this.expireAt(h, refresh ? h.until : sentAt + ttl, sentAt, refresh ? h.ttlMs : ttl);
        out[i] = true;
      } else {
        this.lose(h, gone);
      }
    }
  }

  async release(key: string, token: string): Promise<boolean> {
    const h = this.holding(key, token);
    if (!h) return false;
    return this.unlock(h);
  }

  /**
   * runExclusive's window: stored (durably) as a row with an expiry that every acquire checks,
   * then the live lock is let go. False if the lease was no longer ours.
   */
  async keep(key: string, token: string, ms: number): Promise<boolean> {
    const h = this.holding(key, token);
    if (!h) return false;
    try {
      await timed(
        h.conn.query(this.host.sql.keepWindow, [key, String(Math.ceil(ms)), h.fence.toString()]),
        this.host.timeoutMs,
        'keep window',
      );
    } catch (e) {
      throw backendError(e, 'keep window');
    }
    await this.unlock(h);
    return true;
  }

  async unlock(h: Held): Promise<boolean> {
    const { dedicated, queue } = this.host;
    h.state = 'releasing';
    this.disarm(h);
    this.host.rows.remove(h);
    if (this.held.get(h.key) === h) this.held.delete(h.key);
    // a waiter connection is ready for the next wait at once: its statements run in order, the
    // next wait's after this release; given back to the pool (its locks reset) only once the
    // release answered, below: a reset sent first would let go of this lock before the release
    const onWaiter = h.conn !== dedicated.current;
    if (onWaiter) queue.spareBack(h.conn, true);
    try {
      const rows = await timed(
        h.conn.prepared(this.host.sql.release, [h.lockKey, this.host.channel, h.key]),
        this.host.timeoutMs,
        'release',
      );
      if (Number(rows[0]?.pid) !== this.host.pids.get(h.conn)) {
        const e = new TransactionPoolerError('a release ran on another server session');
        dedicated.pooled = e;
        this.fail(h.conn, e, h.lockKey); // ends the session that still holds the locks
        return false;
      }
      return rows[0]?.ok === true;
    } catch (e) {
      // unknown whether the lock (or any other on this session) is still held: end the session
      // (this lock, no longer in `held`, counts as one of its locks)
      this.fail(h.conn, e, h.lockKey);
      return false;
    } finally {
      if (onWaiter) queue.spareBack(h.conn);
      this.host.maybeIdle();
    }
  }

  /** Lets go of a lock already reported lost (its validity ran out); fails the session if unsure. */
  private async unlockLost(h: Held): Promise<void> {
    if (h.conn.closed) return;
    try {
      await timed(
        h.conn.prepared(this.host.sql.release, [h.lockKey, this.host.channel, h.key]),
        this.host.timeoutMs,
        'release',
      );
    } catch (e) {
      this.fail(h.conn, e, h.lockKey);
    }
    if (h.conn !== this.host.dedicated.current) this.host.queue.spareBack(h.conn);
  }

  /** The connection closed or errored: every lease on it is lost. */
  sessionEnded(conn: Conn, cause: unknown): void {
    this.host.dedicated.ended(conn);
    this.host.queue.forget(conn);
    conn.destroy(cause); // the pool drops it (a closed connection cannot go back)
    for (const h of [...this.held.values()]) if (h.conn === conn) this.lose(h, cause);
  }

  /**
   * Gives up on the session: every lease on it is lost; a half-open server session is ended if
   * it still holds one of its locks: those held, and `inFlight` (the advisory key of the statement
   * that failed: a lock being acquired, or being released and already out of `held`).
   */
  fail(conn: Conn, cause: unknown, inFlight: string | null = null): void {
    const mine = [...this.held.values()].filter((h) => h.conn === conn).map((h) => part(h.lockKey));
    if (inFlight !== null) mine.push(part(inFlight));
    const wasOpen = !conn.closed;
    this.sessionEnded(conn, cause);
    if (wasOpen) {
      this.host.track(terminateHolder(this.host.db, this.host.timeoutMs, this.host.pids.get(conn) ?? conn.pid, mine));
    }
  }

  /**
   * After a failed statement: a server-side error (SQLSTATE) left a healthy connection, on which
   * any lock the statement took is let go; anything else (timeout, connection error, failed
   * clean-up) ends the session.
   */
  async afterFailure(conn: Conn, lockKey: string | null, e: unknown): Promise<void> {
    const state = sqlState(e);
    if (state === '42P01' || state === '3F000') {
      // the tables (or the sequence, or the schema: the grant names the sequence first) are gone:
      // re-created on the next use, with a new epoch
      this.host.schemaGone();
    }
    if (conn.closed || !state || state.startsWith('08') || state.startsWith('57')) return this.fail(conn, e, lockKey);
    if (lockKey === null) return;
    const { classid, objid } = lockParts(BigInt(lockKey));
    try {
      await timed(conn.query(this.host.sql.unlockIfHeld, [lockKey, classid, objid]), this.host.timeoutMs, 'clean-up');
    } catch (e2) {
      this.fail(conn, e2, lockKey);
    }
  }

  lose(h: Held, cause: unknown): void {
    if (h.state !== 'held') return;
    h.state = 'lost';
    this.disarm(h);
    this.host.rows.remove(h);
    if (this.held.get(h.key) === h) this.held.delete(h.key);
    for (const cb of this.lost) {
      try {
        cb(h.key, h.token, cause);
      } catch {
        // a listener's failure must not stop the others
      }
    }
    this.host.maybeIdle();
  }

  /**
   * The lease is valid until `until` (its TTL counted from a statement sent at `seenAt`), but
   * never past what the server's keepalives guarantee: `seenAt` + the connection's bound
   * (keepalive.ts). Only a TTL above Linux's largest keepalive idle time reaches that bound: the
   * lease is then re-checked on its connection (`refresh`) halfway there, and lost at the bound
   * if that fails.
   */
  expireAt(h: Held, until: number, seenAt: number, ttlMs: number): void {
    this.disarm(h);
    h.until = until;
    h.ttlMs = ttlMs;
    const bound = seenAt + this.host.keepalives.boundMs(h.conn);
    const refresh = until > bound;
    this.arm(h, refresh ? seenAt + (bound - seenAt) / 2 : until, refresh, bound);
  }

  private arm(h: Held, at: number, refresh: boolean, bound: number): void {
    const timer = setTimeout(
      () => {
        h.timer = null;
        if (h.state !== 'held') return;
        if (refresh) {
          this.arm(h, bound, false, bound); // lost at the bound unless the refresh answers first
          const item = { key: h.key, token: h.token, ttlMs: h.ttlMs };
          this.host.track(this.probe(h.conn, [item], [0], [false], true));
          return;
        }
        // the holder's validity ran out: it is told (the lease is lost), then the lock is let go
        this.lose(h, new BackendError('postgres: the lease ran out of validity without a renewal'));
        this.host.track(this.unlockLost(h));
      },
      Math.max(0, Math.min(at - performance.now(), 2_147_483_647)),
    );
    timer.unref();
    h.timer = timer;
  }

  private disarm(h: Held): void {
    if (h.timer) clearTimeout(h.timer);
    h.timer = null;
  }
}
