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
import { cancel, after, type Timed } from '../../deadlines.js';
import { Sleep } from '../../wait.js';
import { BackendError, ClosedError, InvalidArgumentError, LeaseholdError } from '../../errors.js';
import { backendError, schemaError, timed, type Conn, type Db, type Row } from './client.js';
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
  readonly fence: bigint;
  readonly conn: Conn;
  state: 'held' | 'releasing' | 'lost';
  /** Releases the lock when its validity runs out without an extension. */
  timer: NodeJS.Timeout | null;
  /** The holder value its row is written with (null: none). */
  value: string | null;
}

/**
 * A caller waiting for a lock waits in the server's own lock queue: a blocking
 * `pg_advisory_lock` on a second connection of this backend (a waiter connection, kept for the
 * next wait). Postgres queues lock requests in arrival order, refuses `pg_try_advisory_lock`
 * while anyone waits, and on release grants the lock to the head alone and wakes only it: a fair
 * queue with one wake-up per handoff and no NOTIFY. The grant waits here until the caller's next
 * attempt claims it.
 */
interface Wait {
  readonly key: string;
  readonly token: string;
  readonly lockKey: string;
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

/** A key waited for within this long goes straight into the server's queue on the next acquire. */
const CONTENDED_MS = 2_000;
/** The holder row is written this long after the grant, unless the lease ended by then. */
const RECORD_MS = 5;
/** A grant from the server's queue that nobody claims within this is let go. */
const CLAIM_MS = 2_000;
/** lock_timeout of a queued wait: a safety net (a caller that gives up leaves at once). */
const WAIT_MS = 600_000;
/** How long a refused attempt looks for its wait in pg_locks (its place in the queue). */
const ENQUEUE_MS = 1_000;
/** Waiter connections (server-side waits) one backend uses at once; more waits poll on NOTIFY. */
const MAX_WAITERS = 8;

/** A waiter re-tries at least this often: a holder whose session died sends no NOTIFY. */
const POLL_MS = 500;
/** How long a watch marks its key attended (refreshed at half of it while watched). */
const ATTEND_MS = 600_000;
/** The dedicated connection goes back to the pool after this long with nothing held. */
const IDLE_MS = 5_000;

/**
 * Session locks behind a transaction pooler (PgBouncer `pool_mode = transaction`) would attach
 * to whichever server connection runs the statement: refused, with what to use instead.
 */
export class TransactionPoolerError extends LeaseholdError {
  constructor(detail: string) {
    super(
      'LEASEHOLD_UNSUPPORTED',
      `postgres: session locks need one server session per connection, but ${detail}: this looks like a ` +
        'transaction-pooling PgBouncer (or another transaction pooler). Use xactLock()/tryXactLock() inside ' +
        'your transactions through it, or give postgres() a pool that connects to Postgres directly or ' +
        'through a session-mode pool (see docs/postgres.md, "Deployments")',
    );
  }
}

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
  private conn: Conn | null = null;
  /** The fence epoch of the server start each session connection belongs to (read once). */
  private epochs = new WeakMap<Conn, { epoch: string; started: string }>();
  /** Waits in the server's lock queue, by key (one per key: the engine serialises a key). */
  private readonly waits = new Map<string, Wait>();
  /** Waiter connections: every one open (holding a wait or a granted lock, or spare). */
  private readonly waiterConns = new Set<Conn>();
  /** Waiter connections with nothing on them, ready for the next wait. */
  private readonly spares: Conn[] = [];
  /** Holder rows not yet written (sent after the grant, off its path), by key. */
  private readonly records = new Map<string, Held>();
  /** Holder rows on their way. */
  private readonly recording = new Set<Promise<void>>();
  private recordTimer: NodeJS.Timeout | null = null;
  /** Keys this backend had to wait for lately (when): their next waiting acquire queues at once. */
  private readonly contended = new Map<string, number>();
  private queueGrants = 0;
  /** The server pid of each session connection, as the server says (not the client's key data). */
  private readonly pids = new WeakMap<Conn, number>();
  /** Set once a transaction pooler was seen: every later acquire is refused the same way. */
  private pooled: TransactionPoolerError | null = null;
  private connecting: Promise<Conn> | null = null;
  private idle: NodeJS.Timeout | null = null;
  /** Watched keys (count of watches each), re-marked attended every ATTEND_MS / 2. */
  private readonly watched = new Map<string, number>();
  private watchTimer: NodeJS.Timeout | null = null;
  private schemaReady: Promise<void> | null = null;
  /** The schema check passed (attempts skip it without a microtask turn). */
  private schemaOk = false;
  private closed = false;

  constructor(private readonly config: SessionConfig) {
    this.db = config.db;
    this.sql = statements(config.quotedSchema);
    this.notifier = new Notifier(config.db, config.channel, config.timeoutMs);
    this.results = {
      get: (lockKey) => this.getResult(lockKey),
      put: (lockKey, token, value, ttlMs) => this.putResult(lockKey, token, value, ttlMs),
    };
  }

  async acquire(key: string, request: AcquireRequest): Promise<Grant | null> {
    checkFullKey(key);
    if (!request || typeof request.token !== 'string' || request.token.length === 0) {
      throw new InvalidArgumentError('acquire: token must be a non-empty string');
    }
    if (request.value !== undefined && typeof request.value !== 'string') {
      throw new InvalidArgumentError('acquire: value must be a string');
    }
    this.assertOpen();
    const p = this.attempt(key, request, performance.now());
    this.track(p);
    return p;
  }

  /** `calledAt`: the validity counts from the call, not from the statement (as the engine's does). */
  private async attempt(key: string, request: AcquireRequest, calledAt: number): Promise<Grant | null> {
    if (!this.schemaOk) await this.ensureSchema();
    const mark = this.notifier.mark();
    const w = this.waits.get(key);
    if (w) {
      // our place in the server's queue: granted (claim it) or still waiting (keep it, no I/O)
      if (w.token === request.token && request.queue) {
        if (w.state === 'granted') return this.claim(w, request, calledAt);
        if (w.state === 'waiting') return null;
      }
      this.cancelWait(w);
    }
    if (this.held.has(key) || this.acquiring.has(key)) return this.refused(key, request, mark); // ours already
    const hinted = request.queue && (this.contended.get(key) ?? -Infinity) > performance.now() - CONTENDED_MS;
    if (hinted && !this.closed) {
      // a key this backend waited for lately: straight into the server's queue (one statement:
      // granted at once when free); the next attempt claims the grant
      const w2 = await this.enqueue(key, request.token, advisoryKey(key).toString(), false);
      if (w2) return null;
    }
    this.acquiring.add(key);
    try {
      const lockKey = advisoryKey(key).toString();
      // no await (no extra microtask turn) when the session and its epoch are known
      const conn = this.liveSession() ?? (await this.session());
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
        remember(this.contended, key, performance.now());
        const w2 = await this.enqueue(key, request.token, lockKey, true);
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
      this.pooled = new TransactionPoolerError('a statement on the lock connection ran on another server session');
      this.fail(conn, this.pooled);
      throw this.pooled;
    }
    // another server start than the one whose epoch this connection read: never grant on it
    const e = new BackendError('postgres: the server restarted under the lock connection');
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
    this.record(held, request.value ?? null);
    // a holder value (an election's leader) is visible to everyone once the grant resolves
    if (request.value !== undefined) await this.flushRecords(key);
    return { fence: held.fence };
  }

  /**
   * The holder row (fence, value, session pid: what inspect, list and watchers read) is written
   * RECORD_MS after the grant on a pooled connection, and not at all for a lease already
   * released by then. Inspect and list of this backend write what is pending first.
   */
  private record(held: Held, value: string | null): void {
    this.records.set(held.key, held);
    held.value = value;
    this.recordTimer ??= setTimeout(() => {
      this.recordTimer = null;
      this.track(this.flushRecords());
    }, RECORD_MS);
  }

  /**
   * A lease that ended before its holder row was written: the row is not written, and with no
   * other row pending the timer is cleared (under contention a lease often lives < RECORD_MS).
   * Node keeps its libuv timer armed for a cleared timeout, so the process still wakes once at
   * that time; what this saves is the flush's work, not the wake-up (measured: no change in CPU).
   */
  private unrecord(held: Held): void {
    if (this.records.get(held.key) !== held) return;
    this.records.delete(held.key);
    if (this.records.size === 0 && this.recordTimer) {
      clearTimeout(this.recordTimer);
      this.recordTimer = null;
    }
  }

  private flushRecords(only?: string): Promise<void> {
    const p = this.writeRecords(only);
    this.recording.add(p);
    const done = () => void this.recording.delete(p);
    p.then(done, done);
    return p;
  }

  private async writeRecords(only?: string): Promise<void> {
    const todo = only === undefined ? [...this.records.values()] : [this.records.get(only)].filter((h) => !!h);
    for (const h of todo) this.records.delete(h.key);
    await Promise.all(
      todo
        .filter((h) => h.state === 'held')
        .map((h) => {
          const params = [
            h.key,
            h.fence.toString(),
            String(this.pids.get(h.conn)),
            h.value,
            h.lockKey,
            this.config.channel,
          ];
          return timed(this.db.query(this.sql.record, params), this.config.timeoutMs, 'holder row').catch(() => {});
        }),
    );
  }

  /** Resolves once the holder rows of this backend's grants so far are written. */
  async written(): Promise<void> {
    if (this.records.size > 0) this.track(this.flushRecords());
    await Promise.all([...this.recording]);
  }

  /** Reads (recording first, once per server start) the fence epoch for a session connection. */
  private async epochOf(conn: Conn): Promise<{ epoch: string; started: string }> {
    const known = this.epochs.get(conn);
    if (known) return known;
    for (let round = 0; round < 2; round++) {
      const row = (await timed(conn.query(this.sql.epoch), this.config.timeoutMs, 'fence epoch'))[0];
      if (row?.epoch != null) {
        const ep = { epoch: String(row.epoch), started: String(row.started) };
        this.epochs.set(conn, ep);
        return ep;
      }
      await timed(conn.query(this.sql.bumpEpoch), this.config.timeoutMs, 'fence epoch');
    }
    throw new BackendError('postgres: could not record the fence epoch of this server start');
  }

  /**
   * Joins the server's queue for `key` on a waiter connection and returns once the wait is seen
   * in pg_locks (or already answered); null when no waiter connection can be had (then the caller
   * polls on NOTIFY as before).
   */
  private async enqueue(key: string, token: string, lockKey: string, confirm: boolean): Promise<Wait | null> {
    if (this.waits.size >= MAX_WAITERS) return null;
    let conn: Conn;
    try {
      conn = await this.waiterConn();
    } catch {
      return null;
    }
    if (this.closed) {
      this.spareBack(conn);
      return null;
    }
    const w: Wait = {
      key,
      token,
      lockKey,
      conn,
      state: 'waiting',
      fence: 0n,
      sleeper: null,
      claimTimer: null,
      queued: false,
    };
    this.waits.set(key, w);
    this.track(this.runWait(w, conn));
    // wait until the server has it queued: a later refusal (of anyone) queues behind it
    const { classid, objid } = lockParts(BigInt(lockKey));
    const pid = String(this.pids.get(conn));
    const until = performance.now() + ENQUEUE_MS;
    const session = this.conn;
    while (confirm && !w.queued && w.state === 'waiting' && session && !session.closed && performance.now() < until) {
      try {
        const rows = await timed(
          session.prepared(this.sql.waiting, [pid, classid, objid]),
          this.config.timeoutMs,
          'queue',
        );
        if (rows.length > 0) w.queued = true;
      } catch {
        break;
      }
    }
    return w.state === 'ended' ? null : w;
  }

  /** The blocking statement of one wait; its answer settles the wait. */
  private async runWait(w: Wait, conn: Conn): Promise<void> {
    let spare = false;
    try {
      const ep = await this.epochOf(conn);
      const params = [w.lockKey, w.key, String(this.pids.get(conn)), ep.started, ep.epoch, String(WAIT_MS)];
      const row = (await conn.prepared(this.sql.waitLock, params))[0];
      w.queued = true;
      if (w.state !== 'waiting') {
        // cancelled while the answer was on its way: whatever it got goes with the connection
        if (!conn.closed) conn.destroy(new Error('leasehold: wait cancelled'));
        return;
      }
      const r = this.checkRow(conn, row);
      if (r !== 'held' && r.charCodeAt(0) !== 119) {
        w.state = 'granted';
        w.fence = BigInt(r);
        this.queueGrants++;
        remember(this.contended, w.key, performance.now());
        w.claimTimer = after(CLAIM_MS, () => this.cancelWait(w));
        return;
      }
      if (r !== 'held') remember(this.windowLeft, w.key, Number(r.slice(1)));
      spare = true;
    } catch (e) {
      // lock_timeout (55P03) leaves a healthy connection; anything else ends it
      if (sqlState(e) === '55P03' && !conn.closed) spare = true;
      else if (!conn.closed) conn.destroy(e);
    } finally {
      if (w.state !== 'granted') {
        w.state = 'ended';
        if (this.waits.get(w.key) === w) this.waits.delete(w.key);
        if (spare) this.spareBack(conn);
      }
      finishWait(w);
    }
  }

  /** A granted wait becomes a lease of the caller whose attempt claims it. */
  private claim(w: Wait, request: AcquireRequest, calledAt: number): Promise<Grant | null> {
    return this.granted(this.takeWait(w, request.token), request, calledAt);
  }

  /** A granted wait ends; its lock is the caller's from now on (on the waiter connection). */
  private takeWait(w: Wait, token: string): Held {
    if (w.claimTimer) cancel(w.claimTimer);
    w.claimTimer = null;
    w.state = 'ended';
    if (this.waits.get(w.key) === w) this.waits.delete(w.key);
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
    const w = this.waits.get(key);
    if (!w || w.state !== 'granted' || w.token !== request.token || !request.queue) return null;
    if (request.value !== undefined || this.closed || !this.schemaOk || !w.conn || w.conn.closed) return null;
    const held = this.takeWait(w, request.token);
    this.held.set(key, held);
    this.windowLeft.delete(key);
    this.expireAt(held, performance.now() + request.ttlMs);
    this.record(held, null);
    return { fence: held.fence };
  }

  /** Ends a wait: out of the queue (its connection is dropped), or its unclaimed grant let go. */
  private cancelWait(w: Wait): void {
    if (this.waits.get(w.key) === w) this.waits.delete(w.key);
    if (w.claimTimer) cancel(w.claimTimer);
    w.claimTimer = null;
    const was = w.state;
    w.state = 'ended';
    const conn = w.conn;
    if (conn && was === 'granted') {
      const h = this.newHeld(w.key, w.token, w.lockKey, w.fence, conn);
      this.track(this.unlock(h));
    } else if (conn && was === 'waiting') {
      // the server drops a wait whose client is gone (client_connection_check_interval), or
      // lets go at once of a lock it grants to one
      conn.destroy(new Error('leasehold: wait cancelled'));
    }
    finishWait(w);
  }

  /** Removes a caller that gave up from the server's queue. */
  async leave(key: string, token: string): Promise<void> {
    const w = this.waits.get(key);
    if (w && w.token === token) this.cancelWait(w);
  }

  /** A waiter connection: a spare one, or a new one from the pool (its pid read, the checks set). */
  private async waiterConn(): Promise<Conn> {
    for (let c = this.spares.pop(); c; c = this.spares.pop()) if (!c.closed) return c;
    const conn = await this.db.reserve(Math.min(this.config.timeoutMs, 1_000));
    try {
      const row = (await timed(conn.query(this.sql.waiterSetup), this.config.timeoutMs, 'connect'))[0];
      this.pids.set(conn, Number(row?.pid));
    } catch (e) {
      conn.destroy(e);
      throw e;
    }
    if (this.closed) {
      conn.destroy(new ClosedError('postgres: backend closed'));
      throw new ClosedError('postgres: backend closed');
    }
    this.waiterConns.add(conn);
    conn.onClose((cause) => this.sessionEnded(conn, cause));
    return conn;
  }

  /** A waiter connection with no wait and no lock on it: kept for the next wait (or given back). */
  private spareBack(conn: Conn): void {
    if (conn.closed || conn === this.conn) return;
    for (const h of this.held.values()) if (h.conn === conn) return;
    for (const w of this.waits.values()) if (w.conn === conn) return;
    if (this.closed || this.spares.length >= 1) {
      this.waiterConns.delete(conn);
      this.track(this.resetAndRelease(conn));
      return;
    }
    if (!this.spares.includes(conn)) this.spares.push(conn);
    this.maybeIdle();
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
    this.unrecord(h);
    if (this.held.get(h.key) === h) this.held.delete(h.key);
    // a waiter connection is ready for the next wait at once: its statements run in order, the
    // next wait's after this release
    if (h.conn !== this.conn) this.spareBack(h.conn);
    try {
      const rows = await timed(
        h.conn.prepared(this.sql.release, [h.lockKey, this.config.channel, h.key]),
        this.config.timeoutMs,
        'release',
      );
      if (Number(rows[0]?.pid) !== this.pids.get(h.conn)) {
        this.pooled = new TransactionPoolerError('a release ran on another server session');
        this.fail(h.conn, this.pooled); // ends the session that still holds the locks
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
    if (h.conn !== this.conn) this.spareBack(h.conn);
  }

  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (typeof key !== 'string') return Promise.resolve();
    const windowMs = this.windowLeft.get(key);
    this.windowLeft.delete(key);
    const w = this.waits.get(key);
    if (w && windowMs === undefined) {
      // in the server's queue: woken by the grant alone (or when the wait ends); one object, on
      // the engine's shared timer (this is on the path of every contended handoff)
      if (w.state !== 'waiting' || signal.aborted) return Promise.resolve();
      return new Promise<void>((resolve) => {
        w.sleeper?.done();
        const s = new QueueSleep(w, signal, resolve);
        w.sleeper = s;
        s.start(Math.max(0, maxMs));
      });
    }
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
    const lockKey = advisoryKey(key).toString();
    try {
      const stop = await this.notifier.watch(lockKey, onChange);
      this.watched.set(key, (this.watched.get(key) ?? 0) + 1);
      await this.attend(key);
      this.watchTimer ??= setInterval(() => {
        for (const k of this.watched.keys()) this.track(this.attend(k).catch(() => {}));
      }, ATTEND_MS / 2).unref();
      let stopped = false;
      return () => {
        if (stopped) return;
        stopped = true;
        stop();
        const n = (this.watched.get(key) ?? 1) - 1;
        if (n > 0) this.watched.set(key, n);
        else this.watched.delete(key);
        if (this.watched.size === 0 && this.watchTimer) {
          clearInterval(this.watchTimer);
          this.watchTimer = null;
        }
      };
    } catch (e) {
      throw backendError(e, 'watch');
    }
  }

  /** Marks a watched key attended, so that its grants and releases NOTIFY (refreshed while watched). */
  private async attend(key: string): Promise<void> {
    const params = [key, advisoryKey(key).toString(), String(ATTEND_MS)];
    await timed(this.db.query(this.sql.attend, params), this.config.timeoutMs, 'watch');
  }

  async inspect(key: string): Promise<LockInfo | null> {
    checkFullKey(key);
    this.assertOpen();
    await this.ensureSchema();
    const { classid, objid } = lockParts(advisoryKey(key));
    await this.written(); // what this backend granted shows
    let row;
    try {
      row = (await timed(this.db.query(this.sql.inspect, [key, classid, objid]), this.config.timeoutMs, 'inspect'))[0];
    } catch (e) {
      throw backendError(e, 'inspect');
    }
    if (!row) return null;
    if (row.held === true) {
      const info: LockInfo = { key, fence: BigInt(row.fence == null ? '0' : String(row.fence)), remainingMs: -1 };
      return row.mine === true && typeof row.value === 'string' ? { ...info, value: row.value } : info;
    }
    if (row.wfence != null) return { key, fence: BigInt(String(row.wfence)), remainingMs: Number(row.wait) };
    return null;
  }

  private async getResult(lockKey: string): Promise<string | null> {
    checkFullKey(lockKey);
    await this.ensureSchema();
    try {
      const rows = await timed(this.db.query(this.sql.getResult, [lockKey]), this.config.timeoutMs, 'result read');
      return typeof rows[0]?.value === 'string' ? rows[0].value : null;
    } catch (e) {
      throw backendError(e, 'result read');
    }
  }

  /** Stores only while `token` holds `lockKey`: checked here and by the server (pg_locks). */
  private async putResult(lockKey: string, token: string, value: string, ttlMs: number): Promise<boolean> {
    const h = this.held.get(lockKey);
    if (!h || h.token !== token || h.state !== 'held') return false;
    const { classid, objid } = lockParts(BigInt(h.lockKey));
    try {
      const params = [lockKey, value, String(Math.ceil(ttlMs)), classid, objid];
      const rows = await timed(h.conn.query(this.sql.putResult, params), this.config.timeoutMs, 'result write');
      return rows[0]?.ok === true;
    } catch (e) {
      throw backendError(e, 'result write');
    }
  }

  onLost(cb: LostCallback): void {
    if (typeof cb !== 'function') throw new InvalidArgumentError('onLost: callback must be a function');
    this.lost.add(cb);
    // a Locks instance took this backend: open the session now, so the first acquire does not pay
    // for it within its validity (given back after IDLE_MS when unused; a failure is left to it)
    if (!this.closed && !this.conn && !this.connecting) {
      // the schema check first: it needs a pooled connection of its own, and a small pool could
      // otherwise have none left once the session took its one
      this.track(
        this.ensureSchema()
          .then(() => this.session())
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
    if (this.watchTimer) clearInterval(this.watchTimer);
    this.watchTimer = null;
    this.watched.clear();
    await this.notifier.close();
    if (this.recordTimer) clearTimeout(this.recordTimer);
    this.recordTimer = null;
    this.records.clear();
    for (const w of [...this.waits.values()]) this.cancelWait(w);
    await Promise.allSettled([...this.pending]);
    for (const h of [...this.held.values()]) if (h.state === 'held') await this.unlock(h);
    await Promise.allSettled([...this.pending]);
    await this.giveBack();
  }

  /** Diagnostics (tests): grants out of the server's queue, NOTIFY messages received. */
  get stats(): { queueGrants: number; notifications: number } {
    return { queueGrants: this.queueGrants, notifications: this.notifier.messages };
  }

  /** Number of locks this backend holds (tests and diagnostics). */
  get size(): number {
    return this.held.size;
  }

  /** The server pid of the dedicated connection, or null (tests and diagnostics). */
  get sessionPid(): number | null {
    return this.conn && !this.conn.closed ? (this.pids.get(this.conn) ?? null) : null;
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

  /** The open session connection, if there is one (and no pooler was seen); keeps it from idling out. */
  private liveSession(): Conn | null {
    const c = this.conn;
    if (!c || c.closed || this.pooled) return null;
    this.idleSince = performance.now(); // in use: the idle timer, if armed, waits on
    return c;
  }

  /** The dedicated connection, taken from the pool when there is none. */
  private async session(): Promise<Conn> {
    if (this.idle) clearTimeout(this.idle);
    this.idle = null;
    if (this.pooled) throw this.pooled;
    if (this.conn && !this.conn.closed) return this.conn;
    this.connecting ??= this.open().finally(() => (this.connecting = null));
    return this.connecting;
  }

  /**
   * Takes a connection and makes sure it is one server session: its pid is read, then a second
   * connection holds a transaction open while the first asks again. Behind a transaction pooler
   * the second one takes the first one's (idle, most recently used) server connection, so the
   * first one's next statement runs elsewhere. Each acquire re-checks the pid (one parameter).
   */
  private async open(): Promise<Conn> {
    const { timeoutMs } = this.config;
    const conn = await this.db.reserve(timeoutMs).catch((e) => Promise.reject(backendError(e, 'connect')));
    const pidOf = async (c: { query: Conn['query'] }) =>
      Number((await timed(c.query('SELECT pg_backend_pid() AS pid'), timeoutMs, 'connect'))[0]?.pid);
    try {
      const [first] = await timed(
        // generic plans for the lock statements from their first run (no re-planning per call)
        conn.query(
          `SELECT pg_backend_pid() AS pid, inet_server_port() AS port,
            set_config('plan_cache_mode', 'force_generic_plan', false) AS plans`,
        ),
        timeoutMs,
        'connect',
      );
      const pid = Number(first?.pid);
      // a direct connection (or a 1:1 TCP proxy) is checked no further; anything else is probed
      const serverPort = first?.port == null ? null : Number(first.port);
      // pg knows the pid the server announced at connect: a pooler announces its own (a plain TCP
      // proxy passes the server's through). postgres.js does not tell: a port mismatch counts.
      const proxied =
        conn.keyPid !== undefined
          ? conn.keyPid !== pid
          : serverPort !== null && conn.port !== undefined && conn.port !== serverPort;
      let other: Conn | null = null;
      let clean = true;
      try {
        // a pool of one gives no second connection: the check is skipped (each acquire's pid guard
        // stays). postgres.js (with fetch_types off) may never hand out a second reservation: short
        const wait = Math.min(timeoutMs, this.db.kind === 'postgres.js' ? 300 : 2000);
        if (proxied) other = await this.db.reserve(wait).catch(() => null);
        if (other) {
          clean = false;
          await timed(other.query('BEGIN'), timeoutMs, 'connect');
          const theirs = await pidOf(other);
          const again = await pidOf(conn);
          await timed(other.query('COMMIT'), timeoutMs, 'connect');
          clean = true;
          if (theirs === pid || again !== pid) {
            throw new TransactionPoolerError('its server session changed between two statements');
          }
        }
      } finally {
        if (clean) other?.release();
        else other?.destroy();
      }
      if (this.closed) throw new ClosedError('postgres: backend closed');
      this.pids.set(conn, pid);
      this.conn = conn;
      conn.onClose((cause) => this.sessionEnded(conn, cause));
      return conn;
    } catch (e) {
      if (e instanceof TransactionPoolerError) this.pooled = e;
      conn.destroy(e);
      throw e instanceof LeaseholdError ? e : backendError(e, 'connect');
    }
  }

  private async bumpEpoch(conn: Conn): Promise<void> {
    try {
      await timed(conn.query(this.sql.bumpEpoch), this.config.timeoutMs, 'fence epoch');
    } catch (e) {
      await this.afterFailure(conn, null, e);
      throw backendError(e, 'fence epoch');
    }
  }

  /** Nothing held, nothing in flight: give the connection back after IDLE_MS. */
  private maybeIdle(): void {
    if (this.busy()) return;
    if (!this.conn && this.spares.length === 0) return;
    // one timer for a run of uses (not one per release): it re-arms for what is left of IDLE_MS
    this.idleSince = performance.now();
    if (!this.idle) this.armIdle(IDLE_MS);
  }

  private idleSince = 0;

  /** Closed, or something held, being acquired or waited for: the session stays. */
  private busy(): boolean {
    return this.closed || this.held.size > 0 || this.acquiring.size > 0 || this.waits.size > 0;
  }

  private armIdle(ms: number): void {
    this.idle = setTimeout(() => {
      this.idle = null;
      if (this.busy()) return;
      const left = this.idleSince + IDLE_MS - performance.now();
      if (left > 1) this.armIdle(left);
      else this.track(this.giveBack());
    }, ms);
    this.idle.unref();
  }

  /** Back to the pool, with no lock left on it (or destroyed when that cannot be made sure). */
  private async giveBack(): Promise<void> {
    if (this.idle) clearTimeout(this.idle);
    this.idle = null;
    const conn = this.conn;
    this.conn = null;
    const spares = this.spares.splice(0);
    for (const c of spares) this.waiterConns.delete(c);
    await Promise.all([conn, ...spares].map((c) => (c && !c.closed ? this.resetAndRelease(c) : null)));
  }

  /** Back to the pool with no lock and no setting of ours left on it (destroyed when unsure). */
  private async resetAndRelease(conn: Conn): Promise<void> {
    try {
      await timed(conn.query(this.sql.resetSession), this.config.timeoutMs, 'unlock all');
      conn.release();
    } catch (e) {
      conn.destroy(e);
    }
  }

  /** The connection closed or errored: every lease on it is lost. */
  private sessionEnded(conn: Conn, cause: unknown): void {
    if (this.conn === conn) this.conn = null;
    this.waiterConns.delete(conn);
    const at = this.spares.indexOf(conn);
    if (at >= 0) this.spares.splice(at, 1);
    conn.destroy(cause); // the pool drops it (a closed connection cannot go back)
    for (const h of [...this.held.values()]) if (h.conn === conn) this.lose(h, cause);
  }

  /** Gives up on the session: every lease on it is lost; a half-open server session is ended. */
  private fail(conn: Conn, cause: unknown): void {
    const mine = [...this.held.values()].filter((h) => h.conn === conn).map((h) => part(h.lockKey));
    const wasOpen = !conn.closed;
    this.sessionEnded(conn, cause);
    if (wasOpen) this.track(this.terminate(this.pids.get(conn) ?? conn.pid, mine));
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
    this.unrecord(h);
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

  /** Ends a server session we gave up on, if it still holds one of our locks (never a reused pid). */
  private async terminate(pid: number, parts: string[]): Promise<void> {
    if (!Number.isInteger(pid) || pid <= 0 || parts.length === 0) return;
    const text = `SELECT pg_terminate_backend(pid) FROM (SELECT DISTINCT pid FROM pg_locks WHERE pid = $1::int4
      AND locktype = 'advisory' AND objsubid = 1 AND granted
      AND (classid::int8::text || ':' || objid::int8::text) = ANY ($2::text[])) p`;
    await timed(this.db.query(text, [String(pid), `{${parts.join(',')}}`]), this.config.timeoutMs, 'terminate').catch(
      () => {},
    );
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

/** The SQLSTATE of a server error (both clients put it in `code`), else undefined. */
function sqlState(e: unknown): string | undefined {
  const code = e && typeof e === 'object' ? (e as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

function remember(map: Map<string, number>, key: string, value: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > 4096) {
    const oldest = map.keys().next().value;
    if (oldest !== undefined) map.delete(oldest);
  }
}

/** A wait is over (granted, failed or cancelled: its state says which): its caller's pause returns. */
function finishWait(w: Wait): void {
  w.sleeper?.done();
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
