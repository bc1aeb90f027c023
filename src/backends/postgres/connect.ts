/**
 * The session backend's connections (session.ts): opening the dedicated one (and refusing a
 * transaction pooler), reading the fence epoch of the sequence's current run, and giving a
 * connection back with nothing of ours left on it.
 */
import type { Cutoff } from '../../cutoff.js';
import { BackendError, ClosedError, LeaseholdError } from '../../errors.js';
import { backendError, timed, type Conn, type Db } from './client.js';
import { BASE_IDLE_S, userTimeout } from './keepalive.js';
import { noTimeouts, type Statements } from './sql.js';

/**
 * Session locks through a pooler that may be a transaction pooler (PgBouncer
 * `pool_mode = transaction`): they would attach to whichever server connection runs the
 * statement, shared with other clients (advisory locks are re-entrant within one server
 * session). Refused, with what to do instead.
 */
export class TransactionPoolerError extends LeaseholdError {
  constructor(detail: string) {
    super(
      'LEASEHOLD_UNSUPPORTED',
      `postgres: session locks need one server session per connection, but ${detail}. Session locks are ` +
        'refused: through a transaction pooler (such as a transaction-pooling PgBouncer) they would share a ' +
        'server session with other clients. Give postgres() a pool that connects to Postgres directly, use ' +
        'xactLock()/tryXactLock() inside your transactions through the pooler, or, only if it is a session-mode ' +
        'pool (one server connection per client connection, e.g. PgBouncer pool_mode=session), declare it: ' +
        'postgres(pool, { pooler: \'session\' }) (see docs/postgres.md, "Deployments")',
    );
  }
}

/**
 * Takes a connection and makes sure it is one server session. The server's pid is compared with
 * the one it announced at connect (BackendKeyData, which both clients keep): equal, the client
 * talks to that server process itself (directly or through a plain TCP proxy), and nothing more
 * is needed. Otherwise something in between (a pooler, or a client that does not say) answered
 * the connect, and nothing leasehold can ask tells a session pooler from a transaction pooler
 * for sure: refused (`TransactionPoolerError`) unless the user declared a session-mode pooler
 * (`pooler: 'session'`, their promise). Then a sanity check still runs when the pool has a
 * second connection free: it holds a transaction open while the first connection asks its pid
 * again, and an obvious transaction pooler (the pid moved) is refused all the same. Each
 * acquire and each liveness probe re-checks the pid. On failure the connection is destroyed.
 */
export async function openSession(
  db: Db,
  timeoutMs: number,
  closed: () => boolean,
  pooler: 'session' | undefined,
): Promise<{ conn: Conn; pid: number }> {
  const conn = await db.reserve(timeoutMs).catch((e) => Promise.reject(backendError(e, 'connect')));
  const pidOf = async (c: { query: Conn['query'] }) =>
    Number((await timed(c.query('SELECT pg_backend_pid() AS pid'), timeoutMs, 'connect'))[0]?.pid);
  try {
    // the pid first, alone: nothing is set on a server connection that may be shared
    const pid = await pidOf(conn);
    // A pooler announces a pid of its own at connect; a plain TCP proxy passes the server's.
    const direct = conn.keyPid !== undefined && Number.isFinite(conn.keyPid) && conn.keyPid === pid;
    if (!direct) {
      if (pooler !== 'session') {
        throw new TransactionPoolerError(
          "the lock connection goes through a pooler (the server's pid differs from the one announced at " +
            'connect, or the client did not say it) and postgres() was not told it is a session-mode pooler',
        );
      }
      await probeSession(db, conn, pid, timeoutMs, pidOf);
    }
    // generic plans for the lock statements from their first run (no re-planning per call);
    // TCP keepalives and tcp_user_timeout (12+), as on waiter connections: the server ends a
    // session (and lets go of its locks) within ~8 s of a vanished client host or a partition
    // while it holds no lease (not the OS's ~2 h, or ~15 min with a reply unacknowledged); a grant
    // raises both to its lease's TTL (keepalive.ts). None of the
    // pool's timeouts: a statement cancelled (statement_timeout) or the session ended while idle
    // (idle_session_timeout) would lose every lease.
    const [set] = await timed(
      conn.query(
        `SELECT pg_backend_pid() AS pid,
          set_config('plan_cache_mode', 'force_generic_plan', false) AS plans,
          set_config('tcp_keepalives_idle', '5', false) AS i, set_config('tcp_keepalives_interval', '1', false) AS v,
          set_config('tcp_keepalives_count', '3', false) AS n, ${userTimeout(String(BASE_IDLE_S))} AS u,
          ${noTimeouts}`,
      ),
      timeoutMs,
      'connect',
    );
    if (Number(set?.pid) !== pid) throw new TransactionPoolerError('its server session changed between two statements');
    if (closed()) throw new ClosedError('postgres: backend closed');
    return { conn, pid };
  } catch (e) {
    conn.destroy(e);
    throw e instanceof LeaseholdError ? e : backendError(e, 'connect');
  }
}

/** How long the sanity check behind a declared session pooler waits for its second connection. */
const PROBE_WAIT_MS = 2000;

/**
 * The sanity check of a session behind a declared session-mode pooler: a second connection holds
 * a transaction open while the first asks its pid again. Behind a transaction pooler the second
 * one may take the first one's (idle) server connection, or the first one's next statement may
 * run elsewhere: refused. When no second connection comes in time the check is skipped (the
 * declaration is the user's promise; each statement still checks the pid).
 */
async function probeSession(
  db: Db,
  conn: Conn,
  pid: number,
  timeoutMs: number,
  pidOf: (c: { query: Conn['query'] }) => Promise<number>,
): Promise<void> {
  const other = await db.reserve(Math.min(timeoutMs, PROBE_WAIT_MS)).catch(() => null);
  if (!other) return;
  let clean = false;
  try {
    await timed(other.query('BEGIN'), timeoutMs, 'connect');
    const theirs = await pidOf(other);
    // our (idle) server connection went to another client: a transaction pooler, asked no further
    // (with one server connection per pool, our next statement would wait for their COMMIT)
    const again = theirs === pid ? pid : await pidOf(conn);
    await timed(other.query('COMMIT'), timeoutMs, 'connect');
    clean = true;
    if (theirs === pid || again !== pid) {
      throw new TransactionPoolerError(
        "postgres() was told the pooler is in session mode (pooler: 'session'), yet the lock connection's " +
          'server session changed between two statements: it is a transaction pooler',
      );
    }
  } finally {
    if (clean) other.release();
    else other.destroy();
  }
}

/** What a connection's grants draw under: the epoch, the server's start, the sequence's OID. */
export interface Epoch {
  readonly epoch: string;
  readonly started: string;
  /** The OID of the sequence the epoch is for ('0' when unsure: every grant then asks again). */
  readonly seq: string;
}

/**
 * The fence epoch the sequence counts under, read once per connection: recorded first (bumped in
 * its own durable commit, `bumpEpoch`) when crash recovery or a fresh install left no mark. No
 * connection outlives crash recovery, so the value read stays valid for the connection's life,
 * unless the sequence is re-created (dropped by hand, then migrated): each grant compares the
 * sequence's OID with `seq` and answers 'sequence' (nothing locked) to have it read again.
 */
export async function readEpoch(conn: Conn, sql: Statements, timeoutMs: number): Promise<Epoch> {
  for (let round = 0; round < 2; round++) {
    const row = (await timed(conn.query(sql.epoch), timeoutMs, 'fence epoch'))[0];
    if (row?.epoch != null) {
      return { epoch: String(row.epoch), started: String(row.started), seq: String(row.seq ?? '0') };
    }
    await timed(conn.query(sql.bumpEpoch), timeoutMs, 'fence epoch');
  }
  throw new BackendError('postgres: could not record the fence epoch');
}

/** Back to the pool with no lock and no setting of ours left on it (destroyed when unsure). */
export async function resetAndRelease(conn: Conn, sql: Statements, timeoutMs: number): Promise<void> {
  try {
    await timed(conn.query(sql.resetSession), timeoutMs, 'unlock all');
    conn.release();
  } catch (e) {
    conn.destroy(e);
  }
}

/**
 * Gives connections back to the pool with no lock left on them (destroyed when that cannot be
 * made sure, or once closing our own pool gave the server up: their locks end with them).
 */
export async function giveBackAll(
  conns: readonly (Conn | null)[],
  sql: Statements,
  timeoutMs: number,
  cutoff: Cutoff,
): Promise<void> {
  const back = (c: Conn) =>
    cutoff.gaveUp ? c.destroy() : cutoff.bound(resetAndRelease(c, sql, timeoutMs)).catch(() => c.destroy());
  await Promise.all(conns.map((c) => (c && !c.closed ? back(c) : null)));
}

/** The SQLSTATE of a server error (both clients put it in `code`), else undefined. */
export function sqlState(e: unknown): string | undefined {
  const code = e && typeof e === 'object' ? (e as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** Sets `key` (as the newest entry) in a map bounded to the 4,096 newest keys. */
export function remember(map: Map<string, number>, key: string, value: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > 4096) {
    const oldest = map.keys().next().value;
    if (oldest !== undefined) map.delete(oldest);
  }
}

/** The dedicated connection goes back to the pool after this long with nothing held. */
const IDLE_MS = 5_000;

/** What the dedicated connection needs from its backend. */
export interface DedicatedHost {
  readonly db: Db;
  readonly timeoutMs: number;
  /** The user declared a session-mode pooler (`pooler: 'session'`). */
  readonly pooler: 'session' | undefined;
  closed(): boolean;
  /** Something held, being acquired or waited for (or closed): the connection stays. */
  busy(): boolean;
  /** Spare waiter connections are open (they go back with it). */
  hasSpares(): boolean;
  /** A connection was opened as the session, with the server's pid. */
  opened(conn: Conn, pid: number): void;
  /** Nothing was used for IDLE_MS: give the connections back. */
  idleOut(): void;
}

/**
 * The backend's dedicated connection (its session): taken from the pool at the first use, kept
 * while anything is held (and IDLE_MS after), then given back. A pooler refused once is refused
 * from then on.
 */
export class Dedicated {
  private conn: Conn | null = null;
  private connecting: Promise<Conn> | null = null;
  private idle: NodeJS.Timeout | null = null;
  private idleSince = 0;
  /** Set once a pooler was refused: every later acquire is refused the same way. */
  pooled: TransactionPoolerError | null = null;

  constructor(private readonly host: DedicatedHost) {}

  /** The connection, open or not (null: none). */
  get current(): Conn | null {
    return this.conn;
  }

  /** Being opened or open. */
  get started(): boolean {
    return this.conn !== null || this.connecting !== null;
  }

  /** The open connection, if there is one (and no pooler was seen); keeps it from idling out. */
  live(): Conn | null {
    const c = this.conn;
    if (!c || c.closed || this.pooled) return null;
    this.idleSince = performance.now(); // in use: the idle timer, if armed, waits on
    return c;
  }

  /** The connection, taken from the pool when there is none. */
  get(): Promise<Conn> {
    if (this.idle) clearTimeout(this.idle);
    this.idle = null;
    if (this.pooled) return Promise.reject(this.pooled);
    if (this.conn && !this.conn.closed) return Promise.resolve(this.conn);
    this.connecting ??= this.open().finally(() => (this.connecting = null));
    return this.connecting;
  }

  private async open(): Promise<Conn> {
    try {
      const { conn, pid } = await openSession(this.host.db, this.host.timeoutMs, this.host.closed, this.host.pooler);
      this.conn = conn;
      this.host.opened(conn, pid);
      return conn;
    } catch (e) {
      if (e instanceof TransactionPoolerError) this.pooled = e;
      throw e;
    }
  }

  /** Nothing held, nothing in flight: give the connections back after IDLE_MS. */
  maybeIdle(): void {
    if (this.host.busy()) return;
    if (!this.conn && !this.host.hasSpares()) return;
    // one timer for a run of uses (not one per release): it re-arms for what is left of IDLE_MS
    this.idleSince = performance.now();
    if (!this.idle) this.armIdle(IDLE_MS);
  }

  private armIdle(ms: number): void {
    this.idle = setTimeout(() => {
      this.idle = null;
      if (this.host.busy()) return;
      const left = this.idleSince + IDLE_MS - performance.now();
      if (left > 1) this.armIdle(left);
      else this.host.idleOut();
    }, ms);
    this.idle.unref();
  }

  /** The connection ended (nothing to give back). */
  ended(conn: Conn): void {
    if (this.conn === conn) this.conn = null;
  }

  /** Takes the connection out (to give it back): none from now on, until the next `get`. */
  take(): Conn | null {
    if (this.idle) clearTimeout(this.idle);
    this.idle = null;
    const conn = this.conn;
    this.conn = null;
    return conn;
  }
}
