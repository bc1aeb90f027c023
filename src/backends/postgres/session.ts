/**
 * Session mode: each held lock is a session-level advisory lock on a connection taken from the
 * user's pool and kept until release. The server keeps the lock while that connection lives, so
 * renewal is a liveness probe on it (`extend`), and a connection error or close is reported at
 * once (`onLost`). Connections are always given back, or destroyed when they may be unhealthy
 * (a failed or timed-out statement may have left a lock behind on them).
 *
 * The TTL is the holder's validity: a lock neither extended nor released within its TTL is
 * released by the backend itself (so a detached or forgotten lease cannot pin a connection
 * forever), also after `close()` — as a stored expiry would on a TTL backend.
 */
import type {
  AcquireRequest,
  Backend,
  BackendCapabilities,
  ExtendItem,
  Grant,
  LockInfo,
  LostCallback,
} from '../../backend.js';
import { BackendError, InvalidArgumentError } from '../../errors.js';
import { backendError, timed, type Conn, type Db } from './client.js';
import { advisoryKey, checkFullKey, lockParts } from './keys.js';
import { Notifier } from './notify.js';
import { createTables, statements, tablesExist, type Statements } from './sql.js';

export interface SessionConfig {
  readonly db: Db;
  readonly quotedSchema: string;
  readonly channel: string;
  readonly timeoutMs: number;
  readonly autoMigrate: boolean;
}

interface Held {
  readonly key: string;
  readonly token: string;
  readonly lockKey: string;
  readonly conn: Conn;
  state: 'held' | 'releasing' | 'lost';
  /** Releases the lock when its validity runs out without an extension. */
  timer: NodeJS.Timeout | null;
}

export class PostgresBackend implements Backend {
  readonly name = 'postgres';
  readonly capabilities: BackendCapabilities = { push: true, fair: false, value: false, results: false, session: true };
  private readonly db: Db;
  private readonly sql: Statements;
  private readonly held = new Map<string, Held>();
  private readonly lost = new Set<LostCallback>();
  private readonly notifier: Notifier;
  private readonly pending = new Set<Promise<unknown>>();
  private schemaReady: Promise<void> | null = null;
  private closed = false;

  constructor(private readonly config: SessionConfig) {
    this.db = config.db;
    this.sql = statements(config.quotedSchema);
    this.notifier = new Notifier(config.db, config.channel, config.timeoutMs);
  }

  async acquire(key: string, request: AcquireRequest): Promise<Grant | null> {
    checkFullKey(key);
    if (!request || typeof request.token !== 'string' || request.token.length === 0) {
      throw new InvalidArgumentError('acquire: token must be a non-empty string');
    }
    this.assertOpen();
    const { timeoutMs } = this.config;
    await this.ensureSchema();
    const lockKey = advisoryKey(key).toString();
    const mark = this.notifier.mark();
    const conn = await this.db.reserve(timeoutMs).catch((e) => Promise.reject(backendError(e, 'acquire')));
    const sentAt = performance.now();
    let row;
    try {
      row = (await timed(conn.query(this.sql.acquire, [lockKey, key]), timeoutMs, 'acquire'))[0];
    } catch (e) {
      await this.discard(conn, lockKey, e); // the lock may have been granted before the failure
      if (sqlState(e) === '42P01') this.schemaReady = null;
      throw backendError(e, 'acquire');
    }
    if (!row) {
      conn.release();
      if (request.queue) this.notifier.failedAttempt(key, mark);
      return null;
    }
    const held: Held = { key, token: request.token, lockKey, conn, state: 'held', timer: null };
    if (this.closed) {
      await this.unlock(held);
      throw new BackendError('postgres: backend closed');
    }
    const previous = this.held.get(key);
    if (previous) this.lose(previous, new BackendError('postgres: lock re-granted, the old connection was gone'));
    this.held.set(key, held);
    this.expireAt(held, sentAt + request.ttlMs);
    conn.onClose((cause) => this.lose(held, cause));
    return { fence: BigInt(String(row.fence)) };
  }

  /** The liveness probe: is the holding connection alive and still holding the lock? */
  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    return Promise.all(items.map((item) => this.probe(item)));
  }

  private async probe(item: ExtendItem): Promise<boolean> {
    const h = this.held.get(item.key);
    if (!h || h.token !== item.token || h.state !== 'held') return false;
    const { classid, objid } = lockParts(BigInt(h.lockKey));
    const ms = Math.min(this.config.timeoutMs, Math.max(Math.floor(item.ttlMs / 3), 200));
    let cause: unknown = new BackendError('postgres: the connection no longer holds the advisory lock');
    const sentAt = performance.now();
    try {
      const rows = await timed(h.conn.query(this.sql.probe, [classid, objid]), ms, 'liveness probe');
      if (rows[0]?.held === true && h.state === 'held') {
        this.expireAt(h, sentAt + item.ttlMs);
        return true;
      }
      if (h.state !== 'held') return false;
    } catch (e) {
      cause = e;
    }
    if (h.state === 'held') {
      const gone = h.conn.closed;
      this.lose(h, cause);
      if (!gone) this.track(this.terminateStale(h)); // a half-open session may still hold the lock server-side
    }
    return false;
  }

  async release(key: string, token: string): Promise<boolean> {
    const h = this.held.get(key);
    if (!h || h.token !== token || h.state !== 'held') return false;
    return this.unlock(h);
  }

  private async unlock(h: Held): Promise<boolean> {
    h.state = 'releasing';
    this.disarm(h);
    if (this.held.get(h.key) === h) this.held.delete(h.key);
    try {
      const rows = await timed(
        h.conn.query(this.sql.release, [h.lockKey, this.config.channel]),
        this.config.timeoutMs,
        'release',
      );
      if (rows[0]?.ok === true) {
        h.conn.release();
        return true;
      }
      h.conn.destroy(new BackendError('postgres: lock was not held at release'));
      return false;
    } catch (e) {
      const gone = h.conn.closed; // closed by the server: its locks went with it
      h.conn.destroy(e);
      if (!gone) this.track(this.terminateStale(h));
      return false; // the session is gone (or unreachable): the lock is no longer ours to release
    }
  }

  async waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (typeof key !== 'string') return;
    return this.notifier.wait(key, advisoryKey(key).toString(), signal, maxMs);
  }

  async inspect(key: string): Promise<LockInfo | null> {
    checkFullKey(key);
    this.assertOpen();
    await this.ensureSchema();
    const { classid, objid } = lockParts(advisoryKey(key));
    let row;
    try {
      row = (await timed(this.db.query(this.sql.inspect, [key, classid, objid]), this.config.timeoutMs, 'inspect'))[0];
    } catch (e) {
      throw backendError(e, 'inspect');
    }
    if (!row || row.held !== true) return null;
    return { key, fence: BigInt(row.fence == null ? '0' : String(row.fence)), remainingMs: -1 };
  }

  onLost(cb: LostCallback): void {
    if (typeof cb !== 'function') throw new InvalidArgumentError('onLost: callback must be a function');
    this.lost.add(cb);
  }

  /**
   * Stops acquiring, wakes and ends waiting, gives the LISTEN connection back. Locks still held
   * (the engine releases its leases first; what remains was detached, e.g. a `runExclusive`
   * window) keep their connection until their validity runs out, then are released.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.notifier.close();
    await Promise.all([...this.pending]);
  }

  /** Number of locks this backend holds (tests and diagnostics). */
  get size(): number {
    return this.held.size;
  }

  /** Creates the tables on first use (unless `migrate: false`); cached, retried after failure. */
  ensureSchema(): Promise<void> {
    if (!this.config.autoMigrate) return Promise.resolve();
    if (!this.schemaReady) {
      const { quotedSchema, timeoutMs } = this.config;
      const run = async () => {
        if (await tablesExist(this.db, quotedSchema)) return;
        await this.db.transaction((tx) => createTables(tx, quotedSchema));
      };
      this.schemaReady = timed(run(), Math.max(timeoutMs, 30_000), 'migrate').catch((e) => {
        this.schemaReady = null;
        throw backendError(e, 'creating the fence table');
      });
    }
    return this.schemaReady;
  }

  private expireAt(h: Held, at: number): void {
    this.disarm(h);
    const timer = setTimeout(
      () => {
        h.timer = null;
        if (h.state === 'held') this.track(this.unlock(h));
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

  /**
   * After a failed acquire: a server-side error (SQLSTATE) left a healthy connection, which is
   * pooled again once any lock the statement took on it is let go; anything else (timeout,
   * connection error, failed clean-up) destroys it. Destroying is the last resort: postgres.js
   * 3.4 loses a `reserve()` that is pending while a connection closes.
   */
  private async discard(conn: Conn, lockKey: string, e: unknown): Promise<void> {
    const state = sqlState(e);
    if (conn.closed || !state || state.startsWith('08') || state.startsWith('57')) return conn.destroy(e);
    const { classid, objid } = lockParts(BigInt(lockKey));
    try {
      await timed(conn.query(this.sql.unlockIfHeld, [lockKey, classid, objid]), this.config.timeoutMs, 'clean-up');
      conn.release();
    } catch (e2) {
      conn.destroy(e2);
    }
  }

  private lose(h: Held, cause: unknown): void {
    if (h.state !== 'held') return;
    h.state = 'lost';
    this.disarm(h);
    if (this.held.get(h.key) === h) this.held.delete(h.key);
    h.conn.destroy(cause);
    for (const cb of this.lost) {
      try {
        cb(h.key, h.token, cause);
      } catch {
        // a listener's failure must not stop the others
      }
    }
  }

  /** Ends the server session of a connection we gave up on, if it still holds our lock. */
  private async terminateStale(h: Held): Promise<void> {
    if (!Number.isInteger(h.conn.pid) || h.conn.pid <= 0) return;
    const { classid, objid } = lockParts(BigInt(h.lockKey));
    const text = `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE pid = $1::int4 AND locktype = 'advisory'
      AND classid = $2::int8::oid AND objid = $3::int8::oid AND objsubid = 1 AND granted`;
    await timed(this.db.query(text, [String(h.conn.pid), classid, objid]), this.config.timeoutMs, 'terminate').catch(
      () => {},
    );
  }

  private track(p: Promise<unknown>): void {
    this.pending.add(p);
    const done = () => void this.pending.delete(p);
    p.then(done, done);
  }

  private assertOpen(): void {
    if (this.closed) throw new BackendError('postgres: backend closed');
  }
}

/** The SQLSTATE of a server error (both clients put it in `code`), else undefined. */
function sqlState(e: unknown): string | undefined {
  const code = e && typeof e === 'object' ? (e as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}
