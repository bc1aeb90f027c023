/**
 * Session mode: every lock a backend (one `Locks` instance) holds is a session-level advisory
 * lock on ONE dedicated connection taken from the user's pool, kept while anything is held (and
 * a few seconds after), then given back. Holding 20 locks takes one connection, not 20.
 *
 * What a failure of that connection means: the server lets go of every lock on it as the
 * session ends, so EVERY lease it carried is lost, and each one is signalled (`onLost`, the
 * lease's `signal`) at once. A statement on it that fails or times out in a way that leaves its
 * state unknown is treated the same: the connection is destroyed (and its server session
 * terminated, in case it is only half-open), all its leases are signalled lost.
 *
 * The TTL is the holder's validity: a lock neither extended nor released within its TTL is
 * released by the backend itself. `runExclusive`'s `lockAtLeastFor` window is written to a row
 * with an expiry (`keep`), then the live lock is let go: the window outlives close() and crashes.
 *
 * Beside it: connect.ts (opening the session connection, the fence epoch), queue.ts (waiting in
 * the server's lock queue on waiter connections), holders.ts (the holder rows).
 */
import type {
  AcquireRequest,
  Backend,
  BackendCapabilities,
  ExtendItem,
  Grant,
  LockInfo,
  LostCallback,
  ResultStore,
} from '../../backend.js';
import { inspect } from 'node:util';
import { BackendError, ClosedError, InvalidArgumentError } from '../../errors.js';
import { backendError, schemaError, timed, type Conn, type Db, type Row } from './client.js';
import { Dedicated, TransactionPoolerError, readEpoch, remember, resetAndRelease, sqlState } from './connect.js';
import { HolderRows, type HeldLock } from './holders.js';
import { advisoryKey, checkFullKey, checkText, lockParts } from './keys.js';
import { Notifier } from './notify.js';
import { inspectKey, readResult, terminateHolder, writeResult } from './reads.js';
import { ServerQueue, type Wait } from './queue.js';
import { Watches } from './watch.js';
import { createTables, statements, tablesExist, type Statements } from './sql.js';
import { markTransient } from '../../transient.js';

export interface SessionConfig {
  readonly db: Db;
  readonly quotedSchema: string;
  readonly channel: string;
  readonly timeoutMs: number;
  readonly autoMigrate: boolean;
}

/** A lock this backend holds (on its session connection, or on the waiter connection it waited on). */
interface Held extends HeldLock {
  readonly token: string;
  /** Releases the lock when its validity runs out without an extension. */
  timer: NodeJS.Timeout | null;
}

/** A waiter re-tries at least this often: a holder whose session died sends no NOTIFY. */
const POLL_MS = 500;

/** `classid:objid`, as pg_locks shows the lock. */
const part = (lockKey: string) => {
  const { classid, objid } = lockParts(BigInt(lockKey));
  return `${classid}:${objid}`;
};

export class PostgresBackend implements Backend {
  readonly name = 'postgres';
  readonly capabilities: BackendCapabilities = { push: true, fair: true, value: true, results: true, session: true };
  readonly results: ResultStore;
  private readonly db: Db;
  private readonly sql: Statements;
  private readonly held = new Map<string, Held>();
  /** Keys with an acquire in flight on the session (a session lock is re-entrant: never twice). */
  private readonly acquiring = new Set<string>();
  /** Keys whose last attempt met a runExclusive window: ms left, for the next wait. */
  private readonly windowLeft = new Map<string, number>();
  private readonly lost = new Set<LostCallback>();
  private readonly notifier: Notifier;
  private readonly pending = new Set<Promise<unknown>>();
  /** Holder rows (for inspect, list and watchers), written off the grant's path. */
  private readonly rows: HolderRows;
  /** The dedicated connection (the session that holds this backend's locks). */
  private readonly dedicated: Dedicated;
  /** The fence epoch of the server start each session connection belongs to (read once). */
  private epochs = new WeakMap<Conn, { epoch: string; started: string }>();
  /** Waits in the server's lock queue (one per key: the engine serialises a key). */
  private readonly queue: ServerQueue;
  /** The server pid of each session connection, as the server says (not the client's key data). */
  private readonly pids = new WeakMap<Conn, number>();
  private readonly watches: Watches;
  private schemaReady: Promise<void> | null = null;
  /** The schema check passed (attempts skip it without a microtask turn). */
  private schemaOk = false;
  private closed = false;

  constructor(private readonly config: SessionConfig) {
    this.db = config.db;
    this.sql = statements(config.quotedSchema);
    this.notifier = new Notifier(config.db, config.channel, config.timeoutMs);
    const track = (p: Promise<unknown>) => this.track(p);
    this.dedicated = new Dedicated({
      db: config.db,
      timeoutMs: config.timeoutMs,
      closed: () => this.closed,
      busy: () => this.busy(),
      hasSpares: () => this.queue.spareCount > 0,
      opened: (conn, pid) => {
        this.pids.set(conn, pid);
        conn.onClose((cause) => this.sessionEnded(conn, cause));
      },
      idleOut: () => this.track(this.giveBack()),
    });
    this.watches = new Watches(config.db, this.sql, this.notifier, config.timeoutMs, track);
    this.rows = new HolderRows({ ...config, sql: this.sql, pidOf: (conn) => this.pids.get(conn), track });
    this.queue = new ServerQueue({
      db: config.db,
      sql: this.sql,
      timeoutMs: config.timeoutMs,
      pids: this.pids,
      closed: () => this.closed,
      session: () => this.dedicated.current,
      epochOf: (conn) => this.epochOf(conn),
      knownEpoch: (conn) => this.epochs.get(conn),
      checkRow: (conn, row) => this.checkRow(conn, row),
      holdsOn: (conn) => {
        for (const h of this.held.values()) if (h.conn === conn) return true;
        return false;
      },
      ended: (conn, cause) => this.sessionEnded(conn, cause),
      letGo: (w) => this.track(this.unlock(this.newHeld(w.key, w.token, w.lockKey, w.fence, w.conn!))),
      window: (key, ms) => remember(this.windowLeft, key, ms),
      maybeIdle: () => this.maybeIdle(),
      track,
    });
    this.results = {
      get: (lockKey) => this.getResult(lockKey),
      put: (lockKey, token, value, ttlMs) => this.putResult(lockKey, token, value, ttlMs),
    };
  }

  /** A holder value is Postgres text: no NUL (its row could not be written). */
  checkValue(value: string, what: string): void {
    checkText(value, what);
  }

  async acquire(key: string, request: AcquireRequest): Promise<Grant | null> {
    checkFullKey(key);
    if (!request || typeof request.token !== 'string' || request.token.length === 0) {
      throw new InvalidArgumentError('acquire: token must be a non-empty string');
    }
    if (request.value !== undefined && typeof request.value !== 'string') {
      throw new InvalidArgumentError('acquire: value must be a string');
    }
    if (request.value !== undefined) this.checkValue(request.value, 'acquire: value');
    this.assertOpen();
    const p = this.attempt(key, request, performance.now());
    this.track(p);
    return p;
  }

  /** `calledAt`: the validity counts from the call, not from the statement (as the engine's does). */
  private async attempt(key: string, request: AcquireRequest, calledAt: number): Promise<Grant | null> {
    if (!this.schemaOk) await this.ensureSchema();
    const mark = this.notifier.mark();
    const w = this.queue.get(key);
    if (w) {
      // our place in the server's queue: granted (claim it) or still waiting (keep it, no I/O)
      if (w.token === request.token && request.queue) {
        if (w.state === 'granted') return this.claim(w, request, calledAt);
        if (w.state === 'waiting') return null;
      }
      this.queue.cancel(w);
    }
    if (this.held.has(key) || this.acquiring.has(key)) return this.refused(key, request, mark); // ours already
    const hinted = request.queue && this.queue.contendedLately(key);
    if (hinted && !this.closed) {
      // a key this backend waited for lately: straight into the server's queue (one statement:
      // granted at once when free); the next attempt claims the grant
      const w2 = await this.queue.enqueue(key, request.token, advisoryKey(key).toString(), false);
      if (w2) return null;
    }
    this.acquiring.add(key);
    try {
      const lockKey = advisoryKey(key).toString();
      // no await (no extra microtask turn) when the session and its epoch are known
      const conn = this.dedicated.live() ?? (await this.dedicated.get());
      let row: Row | undefined;
      try {
        const ep = this.epochs.get(conn) ?? (await this.epochOf(conn));
        const params = [lockKey, key, String(this.pids.get(conn)), ep.started, ep.epoch];
        row = (await timed(conn.prepared(this.sql.acquire, params), this.config.timeoutMs, 'acquire'))[0];
      } catch (e) {
        await this.afterFailure(conn, lockKey, e);
        throw backendError(e, 'acquire');
      }
      const r = this.checkRow(conn, row);
      if (r !== 'held') {
        if (r.charCodeAt(0) === 119) {
          remember(this.windowLeft, key, Number(r.slice(1)));
          return this.refused(key, request, mark);
        }
        return await this.granted(this.newHeld(key, request.token, lockKey, BigInt(r), conn), request, calledAt);
      }
      if (request.queue && !this.closed) {
        // take a place in the server's queue now: arrival order is the order of refusals
        this.queue.markContended(key);
        const w2 = await this.queue.enqueue(key, request.token, lockKey, true);
        if (w2?.state === 'granted') return this.claim(w2, request, calledAt);
        if (w2) return null;
        // no waiter connection: poll, with releases of this key NOTIFYing (attended for 60 s)
        this.track(this.db.query(this.sql.attend, [key, lockKey, '60000']).catch(() => {}));
      }
      return this.refused(key, request, mark);
    } finally {
      this.acquiring.delete(key);
      this.maybeIdle();
    }
  }

  /** A refused attempt of a caller that will wait: its NOTIFY wake-up is armed (no new subscription). */
  private refused(key: string, request: AcquireRequest, mark: number): null {
    if (request.queue) this.notifier.failedAttempt(key, mark, false);
    return null;
  }

  /**
   * The answer of a lock statement: a fence (decimal digits: granted), 'held' or `w<ms>` (a
   * window); a moved or restarted session throws.
   */
  private checkRow(conn: Conn, row: Row | undefined): string {
    const r = row?.r;
    if (typeof r === 'string' && r.length > 0) {
      const c = r.charCodeAt(0);
      if ((c >= 48 && c <= 57) || r === 'held' || c === 119) return r;
    }
    if (r === 'moved') {
      const e = new TransactionPoolerError('a statement on the lock connection ran on another server session');
      this.dedicated.pooled = e;
      this.fail(conn, e);
      throw e;
    }
    // another server start than the one whose epoch this connection read: never grant on it
    const e = markTransient(new BackendError('postgres: the server restarted under the lock connection'));
    this.fail(conn, e);
    throw e;
  }

  private newHeld(key: string, token: string, lockKey: string, fence: bigint, conn: Conn): Held {
    return { key, token, lockKey, fence, conn, state: 'held', timer: null, value: null };
  }

  /** A lock this session got: a lease, unless it came too late or the backend closed meanwhile. */
  private async granted(held: Held, request: AcquireRequest, calledAt: number): Promise<Grant | null> {
    const { key, conn } = held;
    this.held.set(key, held);
    this.windowLeft.delete(key);
    // a grant that arrives after its own validity (a starved process) is void: let it go
    const late = performance.now() >= calledAt + request.ttlMs - Math.floor(request.ttlMs * 0.01) - 2;
    if (late && !this.closed && !conn.closed) {
      await this.unlock(held);
      return null;
    }
    if (this.closed) {
      if (!conn.closed) await this.unlock(held);
      this.held.delete(key);
      throw new ClosedError('postgres: backend closed');
    }
    if (conn.closed) {
      // the session of this grant ended before it was claimed (a waiter connection): no lock
      if (this.held.get(key) === held) this.held.delete(key);
      return null;
    }
    this.expireAt(held, calledAt + request.ttlMs);
    this.rows.add(held, request.value ?? null);
    // a holder value (an election's leader) is visible to everyone once the grant resolves
    if (request.value !== undefined) await this.rows.flush(key);
    return { fence: held.fence };
  }

  /** Resolves once the holder rows of this backend's grants so far are written. */
  written(): Promise<void> {
    return this.rows.written();
  }

  /** The fence epoch of a session connection's server start (read once per connection). */
  private async epochOf(conn: Conn): Promise<{ epoch: string; started: string }> {
    const known = this.epochs.get(conn);
    if (known) return known;
    const ep = await readEpoch(conn, this.sql, this.config.timeoutMs);
    this.epochs.set(conn, ep);
    return ep;
  }

  /** A granted wait becomes a lease of the caller whose attempt claims it. */
  private claim(w: Wait, request: AcquireRequest, calledAt: number): Promise<Grant | null> {
    return this.granted(this.takeWait(w, request.token), request, calledAt);
  }

  /** A granted wait ends; its lock is the caller's from now on (on the waiter connection). */
  private takeWait(w: Wait, token: string): Held {
    this.queue.take(w);
    return this.newHeld(w.key, token, w.lockKey, w.fence, w.conn!);
  }

  /**
   * The engine asks this after a pause, in place of an attempt: a grant the server's queue gave
   * to this caller's wait is taken here without a bounded call, a promise or a statement (the
   * waiter's path from the server's answer to its lease, which every contended handoff waits
   * for). Null leaves everything to the attempt: no such grant yet, or one that needs I/O or a
   * check first (a holder value to write, a closed backend or connection).
   */
  handedOver(key: string, request: AcquireRequest): Grant | null {
    const w = this.queue.get(key);
    if (!w || w.state !== 'granted' || w.token !== request.token || !request.queue) return null;
    if (request.value !== undefined || this.closed || !this.schemaOk || !w.conn || w.conn.closed) return null;
    const held = this.takeWait(w, request.token);
    this.held.set(key, held);
    this.windowLeft.delete(key);
    this.expireAt(held, performance.now() + request.ttlMs);
    this.rows.add(held, null);
    return { fence: held.fence };
  }

  /** Removes a caller that gave up from the server's queue. */
  async leave(key: string, token: string): Promise<void> {
    const w = this.queue.get(key);
    if (w && w.token === token) this.queue.cancel(w);
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

  private async probe(conn: Conn, items: readonly ExtendItem[], idx: number[], out: boolean[]): Promise<void> {
    const minTtl = Math.min(...idx.map((i) => items[i]!.ttlMs));
    const ms = Math.min(this.config.timeoutMs, Math.max(Math.floor(minTtl / 3), 200));
    const sentAt = performance.now();
    let here: Set<string>;
    try {
      here = new Set((await timed(conn.prepared(this.sql.heldHere), ms, 'liveness probe')).map((r) => String(r.k)));
    } catch (e) {
      this.fail(conn, e);
      return;
    }
    const gone = new BackendError('postgres: the session no longer holds the advisory lock');
    for (const i of idx) {
      const h = this.held.get(items[i]!.key);
      if (!h || h.conn !== conn || h.state !== 'held') continue;
      if (here.has(part(h.lockKey))) {
        this.expireAt(h, sentAt + items[i]!.ttlMs);
        out[i] = true;
      } else {
        this.lose(h, gone);
      }
    }
  }

  async release(key: string, token: string): Promise<boolean> {
    const h = this.held.get(key);
    if (!h || h.token !== token || h.state !== 'held') return false;
    return this.unlock(h);
  }

  /**
   * runExclusive's window: stored (durably) as a row with an expiry that every acquire checks,
   * then the live lock is let go. False if the lease was no longer ours.
   */
  async keep(key: string, token: string, ms: number): Promise<boolean> {
    const h = this.held.get(key);
    if (!h || h.token !== token || h.state !== 'held') return false;
    try {
      await timed(
        h.conn.query(this.sql.keepWindow, [key, String(Math.ceil(ms)), h.fence.toString()]),
        this.config.timeoutMs,
        'keep window',
      );
    } catch (e) {
      throw backendError(e, 'keep window');
    }
    await this.unlock(h);
    return true;
  }

  private async unlock(h: Held): Promise<boolean> {
    h.state = 'releasing';
    this.disarm(h);
    this.rows.remove(h);
    if (this.held.get(h.key) === h) this.held.delete(h.key);
    // a waiter connection is ready for the next wait at once: its statements run in order, the
    // next wait's after this release
    if (h.conn !== this.dedicated.current) this.queue.spareBack(h.conn);
    try {
      const rows = await timed(
        h.conn.prepared(this.sql.release, [h.lockKey, this.config.channel, h.key]),
        this.config.timeoutMs,
        'release',
      );
      if (Number(rows[0]?.pid) !== this.pids.get(h.conn)) {
        const e = new TransactionPoolerError('a release ran on another server session');
        this.dedicated.pooled = e;
        this.fail(h.conn, e); // ends the session that still holds the locks
        return false;
      }
      return rows[0]?.ok === true;
    } catch (e) {
      // unknown whether the lock (or any other on this session) is still held: end the session
      this.fail(h.conn, e);
      return false;
    } finally {
      this.maybeIdle();
    }
  }

  /** Lets go of a lock already reported lost (its validity ran out); fails the session if unsure. */
  private async unlockLost(h: Held): Promise<void> {
    if (h.conn.closed) return;
    try {
      await timed(
        h.conn.prepared(this.sql.release, [h.lockKey, this.config.channel, h.key]),
        this.config.timeoutMs,
        'release',
      );
    } catch (e) {
      this.fail(h.conn, e);
    }
    if (h.conn !== this.dedicated.current) this.queue.spareBack(h.conn);
  }

  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (typeof key !== 'string') return Promise.resolve();
    const windowMs = this.windowLeft.get(key);
    this.windowLeft.delete(key);
    const w = this.queue.get(key);
    // in the server's queue: woken by the grant alone (or when the wait ends)
    if (w && windowMs === undefined) return this.queue.sleep(w, signal, maxMs);
    const cap = windowMs === undefined ? POLL_MS : Math.max(POLL_MS, windowMs + 5);
    try {
      return this.notifier.wait(key, advisoryKey(key).toString(), signal, Math.min(maxMs, cap));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Calls `onChange` on each grant and release of `key` (NOTIFY), and on a reconnect. */
  async watch(key: string, onChange: () => void): Promise<() => void> {
    checkFullKey(key);
    if (typeof onChange !== 'function') throw new InvalidArgumentError('watch: onChange must be a function');
    this.assertOpen();
    await this.ensureSchema();
    try {
      return await this.watches.watch(key, onChange);
    } catch (e) {
      throw backendError(e, 'watch');
    }
  }

  async inspect(key: string): Promise<LockInfo | null> {
    checkFullKey(key);
    this.assertOpen();
    await this.ensureSchema();
    await this.written(); // what this backend granted shows
    return inspectKey(this.db, this.sql, this.config.timeoutMs, key);
  }

  private async getResult(lockKey: string): Promise<string | null> {
    checkFullKey(lockKey);
    await this.ensureSchema();
    return readResult(this.db, this.sql, this.config.timeoutMs, lockKey);
  }

  /** Stores only while `token` holds `lockKey`: checked here and by the server (pg_locks). */
  private async putResult(lockKey: string, token: string, value: string, ttlMs: number): Promise<boolean> {
    const h = this.held.get(lockKey);
    if (!h || h.token !== token || h.state !== 'held') return false;
    return writeResult(h.conn, this.sql, this.config.timeoutMs, { key: lockKey, lockKey: h.lockKey, value, ttlMs });
  }

  onLost(cb: LostCallback): void {
    if (typeof cb !== 'function') throw new InvalidArgumentError('onLost: callback must be a function');
    this.lost.add(cb);
    // a Locks instance took this backend: open the session now, so the first acquire does not pay
    // for it within its validity (given back after IDLE_MS when unused; a failure is left to it)
    if (!this.closed && !this.dedicated.started) {
      // the schema check first: it needs a pooled connection of its own, and a small pool could
      // otherwise have none left once the session took its one
      this.track(
        this.ensureSchema()
          .then(() => this.dedicated.get())
          .then(
            () => this.maybeIdle(),
            () => {},
          ),
      );
    }
  }

  /**
   * Stops acquiring, ends waiting and watching, lets go of anything still held (the engine
   * released its leases first; windows live in rows) and gives the connections back.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.watches.close();
    await this.notifier.close();
    this.rows.clear();
    this.queue.cancelAll();
    await Promise.allSettled([...this.pending]);
    for (const h of [...this.held.values()]) if (h.state === 'held') await this.unlock(h);
    await Promise.allSettled([...this.pending]);
    await this.giveBack();
  }

  /** Diagnostics (tests): grants out of the server's queue, NOTIFY messages received. */
  get stats(): { queueGrants: number; notifications: number } {
    return { queueGrants: this.queue.grants, notifications: this.notifier.messages };
  }

  /** Number of locks this backend holds (tests and diagnostics). */
  get size(): number {
    return this.held.size;
  }

  /** The server pid of the dedicated connection, or null (tests and diagnostics). */
  get sessionPid(): number | null {
    const c = this.dedicated.current;
    return c && !c.closed ? (this.pids.get(c) ?? null) : null;
  }

  /** Creates the tables on first use (unless `migrate: false`); cached, retried after failure. */
  ensureSchema(): Promise<void> {
    if (!this.config.autoMigrate) {
      this.schemaOk = true;
      return Promise.resolve();
    }
    if (!this.schemaReady) {
      const { quotedSchema, timeoutMs } = this.config;
      const run = async () => {
        if (await tablesExist(this.db, quotedSchema)) return;
        await this.db.transaction((tx) => createTables(tx, quotedSchema));
      };
      const ready: Promise<void> = timed(run(), Math.max(timeoutMs, 30_000), 'migrate').then(
        () => {
          // not a check that a 42P01 since made stale (afterFailure started a new one)
          if (this.schemaReady === ready) this.schemaOk = true;
        },
        (e) => {
          if (this.schemaReady === ready) this.schemaReady = null;
          throw schemaError(e);
        },
      );
      this.schemaReady = ready;
    }
    return this.schemaReady;
  }

  /** Closed, or something held, being acquired or waited for: the session stays. */
  private busy(): boolean {
    return this.closed || this.held.size > 0 || this.acquiring.size > 0 || this.queue.size > 0;
  }

  private maybeIdle(): void {
    this.dedicated.maybeIdle();
  }

  /** Back to the pool, with no lock left on it (or destroyed when that cannot be made sure). */
  private async giveBack(): Promise<void> {
    const conn = this.dedicated.take();
    const spares = this.queue.takeSpares();
    const { sql, config } = this;
    await Promise.all(
      [conn, ...spares].map((c) => (c && !c.closed ? resetAndRelease(c, sql, config.timeoutMs) : null)),
    );
  }

  /** The connection closed or errored: every lease on it is lost. */
  private sessionEnded(conn: Conn, cause: unknown): void {
    this.dedicated.ended(conn);
    this.queue.forget(conn);
    conn.destroy(cause); // the pool drops it (a closed connection cannot go back)
    for (const h of [...this.held.values()]) if (h.conn === conn) this.lose(h, cause);
  }

  /** Gives up on the session: every lease on it is lost; a half-open server session is ended. */
  private fail(conn: Conn, cause: unknown): void {
    const mine = [...this.held.values()].filter((h) => h.conn === conn).map((h) => part(h.lockKey));
    const wasOpen = !conn.closed;
    this.sessionEnded(conn, cause);
    if (wasOpen) this.track(terminateHolder(this.db, this.config.timeoutMs, this.pids.get(conn) ?? conn.pid, mine));
  }

  /**
   * After a failed statement: a server-side error (SQLSTATE) left a healthy connection, on which
   * any lock the statement took is let go; anything else (timeout, connection error, failed
   * clean-up) ends the session.
   */
  private async afterFailure(conn: Conn, lockKey: string | null, e: unknown): Promise<void> {
    const state = sqlState(e);
    if (state === '42P01') {
      // the tables (or the sequence) are gone: re-created on the next use, with a new epoch
      this.schemaReady = null;
      this.schemaOk = false;
      this.epochs = new WeakMap();
    }
    if (conn.closed || !state || state.startsWith('08') || state.startsWith('57')) return this.fail(conn, e);
    if (lockKey === null) return;
    const { classid, objid } = lockParts(BigInt(lockKey));
    try {
      await timed(conn.query(this.sql.unlockIfHeld, [lockKey, classid, objid]), this.config.timeoutMs, 'clean-up');
    } catch (e2) {
      this.fail(conn, e2);
    }
  }

  private lose(h: Held, cause: unknown): void {
    if (h.state !== 'held') return;
    h.state = 'lost';
    this.disarm(h);
    this.rows.remove(h);
    if (this.held.get(h.key) === h) this.held.delete(h.key);
    for (const cb of this.lost) {
      try {
        cb(h.key, h.token, cause);
      } catch {
        // a listener's failure must not stop the others
      }
    }
    this.maybeIdle();
  }

  private expireAt(h: Held, at: number): void {
    this.disarm(h);
    const timer = setTimeout(
      () => {
        h.timer = null;
        if (h.state !== 'held') return;
        // the holder's validity ran out: it is told (the lease is lost), then the lock is let go
        this.lose(h, new BackendError('postgres: the lease ran out of validity without a renewal'));
        this.track(this.unlockLost(h));
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

  private track(p: Promise<unknown>): void {
    this.pending.add(p);
    const done = () => void this.pending.delete(p);
    p.then(done, done);
  }

  private assertOpen(): void {
    if (this.closed) throw new ClosedError('postgres: backend closed');
  }

  /** Neither the pool nor its options (a password) print, at any depth; never a token. */
  [inspect.custom](): string {
    return `PostgresBackend { client: '${this.db.kind}', held: ${this.held.size}${this.closed ? ', closed' : ''} }`;
  }
  toJSON(): { name: string; client: string; held: number } {
    return { name: this.name, client: this.db.kind, held: this.held.size };
  }
}
