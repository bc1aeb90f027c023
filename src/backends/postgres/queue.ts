/**
 * Waiting in the server's own lock queue (session.ts's waits). A caller waiting for a lock waits
 * in a blocking `pg_advisory_lock` on a second connection of its backend (a waiter connection,
 * kept for the next wait). Postgres queues lock requests in arrival order, refuses
 * `pg_try_advisory_lock` while anyone waits, and on release grants the lock to the head alone and
 * wakes only it: a fair queue with one wake-up per handoff and no NOTIFY. The grant waits here
 * until the caller's next attempt claims it.
 */
import { cancel, after, type Timed } from '../../deadlines.js';
import { Sleep } from '../../wait.js';
import { ClosedError } from '../../errors.js';
import { timed, type Conn, type Db, type Row } from './client.js';
import { lockParts } from './keys.js';
import { remember, resetAndRelease, sqlState, type Epoch } from './connect.js';
import type { Keepalives } from './keepalive.js';
import type { Statements } from './sql.js';

/** A key waited for within this long goes straight into the server's queue on the next acquire. */
const CONTENDED_MS = 2_000;
/** A grant from the server's queue that nobody claims within this is let go. */
const CLAIM_MS = 2_000;
/** lock_timeout of a queued wait: a safety net (a caller that gives up leaves at once). */
const WAIT_MS = 600_000;
/** How long a refused attempt looks for its wait in pg_locks (its place in the queue). */
const ENQUEUE_MS = 1_000;
/** Waiter connections (server-side waits) one backend uses at once; more waits poll on NOTIFY. */
const MAX_WAITERS = 8;

/** One caller's place in the server's queue for a key. */
export interface Wait {
  readonly key: string;
  readonly token: string;
  readonly lockKey: string;
  /** The waiting caller's TTL: the grant raises the connection's keepalive idle time to it. */
  readonly ttlMs: number;
  conn: Conn | null;
  state: 'waiting' | 'granted' | 'ended';
  fence: bigint;
  /** The caller's pause on this wait (`waitForChange`), woken when it is over. */
  sleeper: QueueSleep | null;
  /** Lets go of a grant nobody claimed. */
  claimTimer: Timed | null;
  /** True once the statement is in the server's queue (seen in pg_locks) or answered. */
  queued: boolean;
}

/** What the queue needs from its backend. */
export interface QueueHost {
  readonly db: Db;
  readonly sql: Statements;
  readonly timeoutMs: number;
  /** The server pid of each connection (written here for waiter connections). */
  readonly pids: WeakMap<Conn, number>;
  /** The TCP keepalive idle time of each connection (a grant raises it to the waiter's TTL). */
  readonly keepalives: Keepalives;
  closed(): boolean;
  /** The dedicated session connection (waits are looked for in pg_locks on it), or null. */
  session(): Conn | null;
  epochOf(conn: Conn): Promise<Epoch>;
  /** The epoch already read on `conn` (no promise, no turn of the event loop), or undefined. */
  knownEpoch(conn: Conn): Epoch | undefined;
  /** The sequence was re-created since `conn` read its epoch: read it again. */
  forgetEpoch(conn: Conn): void;
  /**
   * The answer of a lock statement (a fence, 'held' or `w<ms>`); throws for a moved session
   * (ended, and its server session with it if it holds `inFlight`, a lock taken in the queue).
   */
  checkRow(conn: Conn, row: Row | undefined, inFlight?: string | null): string;
  /** True while a lease of the backend is held on `conn`. */
  holdsOn(conn: Conn): boolean;
  /** A waiter connection closed or errored. */
  ended(conn: Conn, cause: unknown): void;
  /** Lets go of the lock of a granted wait nobody claimed. */
  letGo(w: Wait): void;
  /** A wait met a runExclusive window with `ms` left. */
  window(key: string, ms: number): void;
  maybeIdle(): void;
  track(p: Promise<unknown>): void;
}

export class ServerQueue {
  /** Waits by key (one per key: the engine serialises a key). */
  private readonly waits = new Map<string, Wait>();
  /** Waiter connections with nothing on them, ready for the next wait. */
  private readonly spares: Conn[] = [];
  /** Keys this backend had to wait for lately (when): their next waiting acquire queues at once. */
  private readonly contended = new Map<string, number>();
  /** Grants out of the server's queue (diagnostics). */
  grants = 0;
  /** The schema has no leasehold_after_wait (42883): a grant out of the queue asks `afterWait`. */
  legacy = false;

  constructor(private readonly host: QueueHost) {}

  get(key: string): Wait | undefined {
    return this.waits.get(key);
  }

  get size(): number {
    return this.waits.size;
  }

  get spareCount(): number {
    return this.spares.length;
  }

  /** A key this backend waited for lately: its next waiting acquire goes straight into the queue. */
  contendedLately(key: string): boolean {
    return (this.contended.get(key) ?? -Infinity) > performance.now() - CONTENDED_MS;
  }

  markContended(key: string): void {
    remember(this.contended, key, performance.now());
  }

  /**
   * Joins the server's queue for `key` on a waiter connection and returns once the wait is seen
   * in pg_locks (or already answered); null when no waiter connection can be had (then the caller
   * polls on NOTIFY as before).
   */
  async enqueue(key: string, token: string, lockKey: string, ttlMs: number, confirm: boolean): Promise<Wait | null> {
    const host = this.host;
    if (this.waits.size >= MAX_WAITERS) return null;
    // a spare connection is taken without a turn of the event loop (every contended grant's path)
    let conn = this.spare();
    if (!conn) {
      try {
        conn = await this.waiterConn();
      } catch {
        return null;
      }
    }
    if (host.closed()) {
      this.spareBack(conn);
      return null;
    }
    const w: Wait = {
      key,
      token,
      lockKey,
      ttlMs,
      conn,
      state: 'waiting',
      fence: 0n,
      sleeper: null,
      claimTimer: null,
      queued: false,
    };
    this.waits.set(key, w);
    host.track(this.runWait(w, conn));
    // a hinted wait (confirm false: the key was contended lately) goes on at once: no look in
    // pg_locks, and no BigInt work for one (on the path of every contended grant)
    if (!confirm) return w.state === 'ended' ? null : w;
    // wait until the server has it queued: a later refusal (of anyone) queues behind it
    const { classid, objid } = lockParts(BigInt(lockKey));
    const pid = String(host.pids.get(conn));
    const until = performance.now() + ENQUEUE_MS;
    const session = host.session();
    while (!w.queued && w.state === 'waiting' && session && !session.closed && performance.now() < until) {
      try {
        const rows = await timed(session.prepared(host.sql.waiting, [pid, classid, objid]), host.timeoutMs, 'queue');
        if (rows.length > 0) w.queued = true;
      } catch {
        break;
      }
    }
    return w.state === 'ended' ? null : w;
  }

  /** The blocking statement of one wait; its answer settles the wait. */
  private async runWait(w: Wait, conn: Conn): Promise<void> {
    const host = this.host;
    let spare = false;
    try {
      let row: Row | undefined;
      /** The lock came out of the queue: held here while its window and fence are asked for. */
      let waited = false;
      // the keepalive idle time is raised only once granted: a wait in a partition lapses in ~8 s
      const idle = host.keepalives.need(conn, w.ttlMs);
      // 'sequence': re-created since this connection read its epoch (nothing locked): read again
      for (let round = 0; round < 2 && (round === 0 || row?.r === 'sequence'); round++) {
        if (round > 0) host.forgetEpoch(conn);
        const ep = host.knownEpoch(conn) ?? (await host.epochOf(conn));
        const params = [
          w.lockKey,
          w.key,
          String(host.pids.get(conn)),
          ep.started,
          ep.epoch,
          ep.seq,
          String(WAIT_MS),
          idle,
        ];
        try {
          row = (await conn.prepared(this.legacy ? host.sql.waitLockLegacy : host.sql.waitLock, params))[0];
        } catch (e) {
          // 42883: no leasehold_after_wait in the schema (an earlier version's, `migrate: false`):
          // nothing was locked (the statement failed to parse); this backend waits the old way
          if (sqlState(e) !== '42883' || this.legacy || conn.closed || w.state !== 'waiting') throw e;
          this.legacy = true;
          row = (await conn.prepared(host.sql.waitLockLegacy, params))[0];
        }
        waited = row?.r === 'waited';
        if (waited && w.state === 'waiting') {
          // the function's snapshots are the transaction's (not READ COMMITTED), or there is no
          // function: a new statement checks for a window the holder wrote just before letting go
          // (and draws the fence)
          w.queued = true;
          row = (await timed(conn.prepared(host.sql.afterWait, params.slice(0, 6)), host.timeoutMs, 'grant'))[0];
          waited = !/^(w|sequence$)/.test(String(row?.r)); // the lock is still held here
        }
      }
      w.queued = true;
      if (w.state !== 'waiting') {
        // cancelled while the answer was on its way: whatever it got goes with the connection
        if (!conn.closed) conn.destroy(new Error('leasehold: wait cancelled'));
        return;
      }
      const r = host.checkRow(conn, row, waited ? w.lockKey : null);
      if (r !== 'held') host.keepalives.set(conn, idle); // raised once the lock was granted
      if (r !== 'held' && r.charCodeAt(0) !== 119) {
        w.state = 'granted';
        w.fence = BigInt(r);
        this.grants++;
        this.markContended(w.key);
        w.claimTimer = after(CLAIM_MS, () => this.cancel(w));
        return;
      }
      if (r !== 'held') host.window(w.key, Number(r.slice(1)));
      spare = true;
    } catch (e) {
      // lock_timeout (55P03) and a cancel (57014: pg_cancel_backend, a statement_timeout set
      // anyway) leave a healthy connection, kept once the lock of the wait is surely not on it (a
      // cancel can come after the grant); anything else ends it
      const state = sqlState(e);
      if ((state === '55P03' || state === '57014') && !conn.closed) spare = await this.unlockIfHeld(conn, w.lockKey);
      else if (!conn.closed) conn.destroy(e);
    } finally {
      if (w.state !== 'granted') {
        w.state = 'ended';
        if (this.waits.get(w.key) === w) this.waits.delete(w.key);
        if (spare) this.spareBack(conn);
      }
      w.sleeper?.done();
    }
  }

  /** Lets go of `lockKey` if `conn` holds it: true, or false with the connection destroyed. */
  private async unlockIfHeld(conn: Conn, lockKey: string): Promise<boolean> {
    const { classid, objid } = lockParts(BigInt(lockKey));
    try {
      await timed(conn.query(this.host.sql.unlockIfHeld, [lockKey, classid, objid]), this.host.timeoutMs, 'clean-up');
      return true;
    } catch (e) {
      conn.destroy(e);
      return false;
    }
  }

  /** A granted wait ends: its lock (on `w.conn`, with `w.fence`) is its caller's from now on. */
  take(w: Wait): void {
    if (w.claimTimer) cancel(w.claimTimer);
    w.claimTimer = null;
    w.state = 'ended';
    if (this.waits.get(w.key) === w) this.waits.delete(w.key);
  }

  /** Ends a wait: out of the queue (its connection is dropped), or its unclaimed grant let go. */
  cancel(w: Wait): void {
    if (this.waits.get(w.key) === w) this.waits.delete(w.key);
    if (w.claimTimer) cancel(w.claimTimer);
    w.claimTimer = null;
    const was = w.state;
    w.state = 'ended';
    const conn = w.conn;
    if (conn && was === 'granted') {
      this.host.letGo(w);
    } else if (conn && was === 'waiting') {
      // the server drops a wait whose client is gone (client_connection_check_interval), or
      // lets go at once of a lock it grants to one
      conn.destroy(new Error('leasehold: wait cancelled'));
    }
    w.sleeper?.done();
  }

  /** Ends every wait (the backend closes). */
  cancelAll(): void {
    for (const w of [...this.waits.values()]) this.cancel(w);
  }

  /**
   * The caller's pause on its wait: woken by the grant alone (or when the wait ends); one
   * object, on the engine's shared timer (this is on the path of every contended handoff).
   */
  sleep(w: Wait, signal: AbortSignal, maxMs: number): Promise<void> {
    if (w.state !== 'waiting' || signal.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      w.sleeper?.done();
      const s = new QueueSleep(w, signal, resolve);
      w.sleeper = s;
      s.start(Math.max(0, maxMs));
    });
  }

  /** A spare waiter connection still open, or null. */
  private spare(): Conn | null {
    for (let c = this.spares.pop(); c; c = this.spares.pop()) if (!c.closed) return c;
    return null;
  }

  /** A new waiter connection from the pool (its pid read, the checks set). */
  private async waiterConn(): Promise<Conn> {
    const host = this.host;
    const conn = await host.db.reserve(Math.min(host.timeoutMs, 1_000));
    try {
      const row = (await timed(conn.query(host.sql.waiterSetup), host.timeoutMs, 'connect'))[0];
      host.pids.set(conn, Number(row?.pid));
    } catch (e) {
      conn.destroy(e);
      throw e;
    }
    if (host.closed()) {
      conn.destroy(new ClosedError('postgres: backend closed'));
      throw new ClosedError('postgres: backend closed');
    }
    conn.onClose((cause) => host.ended(conn, cause));
    return conn;
  }

  /**
   * A waiter connection with no wait and no lock on it: kept for the next wait (or given back).
   * `inFlight`: a statement of ours (a release) is still on its way on it: kept when there is
   * room, never given back before that statement answered (the caller calls again then).
   */
  spareBack(conn: Conn, inFlight = false): void {
    const host = this.host;
    if (conn.closed || conn === host.session() || host.holdsOn(conn) || this.spares.includes(conn)) return;
    for (const w of this.waits.values()) if (w.conn === conn) return;
    if (host.closed() || this.spares.length >= 1) {
      if (!inFlight) host.track(resetAndRelease(conn, host.sql, host.timeoutMs));
      return;
    }
    this.spares.push(conn);
    host.maybeIdle();
  }

  /** A connection that ended is no spare any more. */
  forget(conn: Conn): void {
    const at = this.spares.indexOf(conn);
    if (at >= 0) this.spares.splice(at, 1);
  }

  /** Takes every spare connection (to give them back). */
  takeSpares(): Conn[] {
    return this.spares.splice(0);
  }
}

/** A caller's pause on its wait in the server's queue: over, its bound, or its abort. */
class QueueSleep extends Sleep {
  constructor(
    private readonly w: Wait,
    signal: AbortSignal,
    resolve: () => void,
  ) {
    super(signal, resolve);
  }

  protected detach(): boolean {
    if (this.w.sleeper !== this) return false;
    this.w.sleeper = null;
    return true;
  }
}
