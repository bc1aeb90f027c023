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
 * Beside it: leases.ts (the held locks: expiry, liveness probe, release, loss) and held.ts (their
 * shape), schema.ts (the tables and the fence epochs read from them), connect.ts (opening the
 * session connection, the fence epoch), queue.ts (waiting in the server's lock queue on waiter
 * connections), wake.ts (a refused caller's wait for its next attempt), holders.ts (the holder rows).
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
import { Cutoff } from '../../cutoff.js';
import { ClosedError, InvalidArgumentError } from '../../errors.js';
import { backendError, timed, type Conn, type Db, type Row } from './client.js';
import { Dedicated, giveBackAll, remember } from './connect.js';
import { HolderRows } from './holders.js';
import { Keepalives } from './keepalive.js';
import { checkFullKey, checkText } from './keys.js';
import { newHeld } from './held.js';
import { Leases } from './leases.js';
import { Notifier } from './notify.js';
import { inspectKey, resultStore } from './reads.js';
import { ServerQueue } from './queue.js';
import { Schema } from './schema.js';
import { Watches } from './watch.js';
import { sleepUntilChange } from './wake.js';
import { statements, type Statements } from './sql.js';

export interface SessionConfig {
  readonly db: Db;
  readonly quotedSchema: string;
  readonly channel: string;
  readonly timeoutMs: number;
  readonly autoMigrate: boolean;
  /** The user declared a session-mode pooler in front of Postgres (their promise). */
  readonly pooler: 'session' | undefined;
}

export class PostgresBackend implements Backend {
  readonly name = 'postgres';
  readonly capabilities: BackendCapabilities = { push: true, fair: true, value: true, results: true, session: true };
  readonly results: ResultStore;
  private readonly db: Db;
  private readonly sql: Statements;
  /** The locks this backend holds, and their lifecycle. */
  private readonly leases: Leases;
  /** Keys with an acquire in flight on the session (a session lock is re-entrant: never twice). */
  private readonly acquiring = new Set<string>();
  /** Keys whose last attempt met a runExclusive window: ms left, for the next wait. */
  private readonly windowLeft = new Map<string, number>();
  private readonly notifier: Notifier;
  private readonly pending = new Set<Promise<unknown>>();
  /** Holder rows (for inspect, list and watchers), written off the grant's path. */
  private readonly rows: HolderRows;
  /** The dedicated connection (the session that holds this backend's locks). */
  private readonly dedicated: Dedicated;
  /** Waits in the server's lock queue (one per key: the engine serialises a key). */
  private readonly queue: ServerQueue;
  /** The server pid of each session connection, as the server says (not the client's key data). */
  private readonly pids = new WeakMap<Conn, number>();
  private readonly keepalives = new Keepalives();
  private readonly watches: Watches;
  /** The tables (checked on first use) and the fence epochs read from them. */
  private readonly schema: Schema;
  private closed = false;
  /** On fromUrl's own pool: once close() began, a server that does not answer is given up. */
  private readonly cutoff = new Cutoff(
    'postgres: closing: the server did not answer (its locks end with the connection)',
  );

  constructor(private readonly config: SessionConfig) {
    this.db = config.db;
    this.sql = statements(config.quotedSchema);
    this.schema = new Schema({ ...config, sql: this.sql });
    this.notifier = new Notifier(config.db, config.channel, config.timeoutMs);
    const track = (p: Promise<unknown>) => this.track(p);
    this.dedicated = new Dedicated({
      db: config.db,
      timeoutMs: config.timeoutMs,
      pooler: config.pooler,
      closed: () => this.closed,
      busy: () => this.busy(),
      hasSpares: () => this.queue.spareCount > 0,
      opened: (conn, pid) => {
        this.pids.set(conn, pid);
        conn.onClose((cause) => this.leases.sessionEnded(conn, cause));
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
      keepalives: this.keepalives,
      closed: () => this.closed,
      session: () => this.dedicated.current,
      epochOf: (conn) => this.schema.epochOf(conn),
      knownEpoch: (conn) => this.schema.knownEpoch(conn),
      forgetEpoch: (conn) => this.schema.forget(conn),
      checkRow: (conn, row, inFlight) => this.leases.checkRow(conn, row, inFlight),
      holdsOn: (conn) => this.leases.holdsOn(conn),
      ended: (conn, cause) => this.leases.sessionEnded(conn, cause),
      letGo: (w) => this.track(this.leases.unlock(newHeld(w.key, w.token, w.lockKey, w.fence, w.conn!))),
      window: (key, ms) => remember(this.windowLeft, key, ms),
      maybeIdle: () => this.maybeIdle(),
      track,
    });
    this.leases = new Leases({
      ...config,
      sql: this.sql,
      pids: this.pids,
      keepalives: this.keepalives,
      dedicated: this.dedicated,
      queue: this.queue,
      rows: this.rows,
      closed: () => this.closed,
      windowOver: (key) => this.windowLeft.delete(key),
      schemaGone: () => this.schema.gone(),
      maybeIdle: () => this.maybeIdle(),
      track,
    });
    const ready = () => this.ensureSchema();
    const holding = (k: string, t: string) => this.leases.holding(k, t);
    this.results = resultStore(config.db, this.sql, config.timeoutMs, ready, holding, this.cutoff);
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
    const p = this.cutoff.bound(this.attempt(key, request, performance.now()));
    this.track(p);
    return p;
  }

  /** `calledAt`: the validity counts from the call, not from the statement (as the engine's does). */
  private async attempt(key: string, request: AcquireRequest, calledAt: number): Promise<Grant | null> {
    if (!this.schema.ok) await this.ensureSchema();
    const mark = this.notifier.mark();
    const w = this.queue.get(key);
    if (w) {
      // our place in the server's queue: granted (claim it) or still waiting (keep it, no I/O)
      if (w.token === request.token && request.queue) {
        if (w.state === 'granted') return this.leases.claim(w, request, calledAt);
        if (w.state === 'waiting') return null;
      }
      this.queue.cancel(w);
    }
    if (this.leases.held.has(key) || this.acquiring.has(key)) return this.refused(key, request, mark); // ours already
    const hinted = request.queue && this.queue.contendedLately(key);
    if (hinted && !this.closed) {
      // a key this backend waited for lately: straight into the server's queue (one statement:
      // granted at once when free); the next attempt claims the grant
      const w2 = await this.queue.enqueue(key, request.token, this.sql.lockKey(key), request.ttlMs, false);
      if (w2) return null;
    }
    this.acquiring.add(key);
    try {
      const lockKey = this.sql.lockKey(key);
      // no await (no extra microtask turn) when the session and its epoch are known
      const conn = this.dedicated.live() ?? (await this.dedicated.get());
      let row: Row | undefined;
      const idle = this.keepalives.need(conn, request.ttlMs); // '0' unless to raise (keepalive.ts)
      try {
        // 'sequence': re-created since this connection read its epoch (nothing locked): read again
        for (let round = 0; round < 2 && (round === 0 || row?.r === 'sequence'); round++) {
          if (round > 0) this.schema.forget(conn);
          const ep = this.schema.knownEpoch(conn) ?? (await this.schema.epochOf(conn));
          const params = [lockKey, key, String(this.pids.get(conn)), ep.started, ep.epoch, ep.seq, idle];
          row = (await timed(conn.prepared(this.sql.acquire, params), this.config.timeoutMs, 'acquire'))[0];
        }
      } catch (e) {
        await this.leases.afterFailure(conn, lockKey, e);
        throw backendError(e, 'acquire');
      }
      const r = this.leases.checkRow(conn, row);
      if (r !== 'held') {
        this.keepalives.set(conn, idle); // raised once the lock was granted
        if (r.charCodeAt(0) === 119) {
          remember(this.windowLeft, key, Number(r.slice(1)));
          return this.refused(key, request, mark);
        }
        return await this.leases.granted(newHeld(key, request.token, lockKey, BigInt(r), conn), request, calledAt);
      }
      if (request.queue && !this.closed) {
        // take a place in the server's queue now: arrival order is the order of refusals
        this.queue.markContended(key);
        const w2 = await this.queue.enqueue(key, request.token, lockKey, request.ttlMs, true);
        if (w2?.state === 'granted') return this.leases.claim(w2, request, calledAt);
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

  /** Resolves once the holder rows of this backend's grants so far are written. */
  written(): Promise<void> {
    return this.rows.written();
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
    if (request.value !== undefined || this.closed || !this.schema.ok || !w.conn || w.conn.closed) return null;
    return this.leases.handedOver(key, w, request);
  }

  /** Removes a caller that gave up from the server's queue. */
  async leave(key: string, token: string): Promise<void> {
    const w = this.queue.get(key);
    if (w && w.token === token) this.queue.cancel(w);
  }

  /** The liveness probe: one statement per session connection, whatever the number of leases. */
  extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    return this.cutoff.bound(this.leases.extend(items));
  }

  release(key: string, token: string): Promise<boolean> {
    return this.cutoff.bound(this.leases.release(key, token));
  }

  /** runExclusive's window (leases.ts): a row with an expiry, then the live lock is let go. */
  keep(key: string, token: string, ms: number): Promise<boolean> {
    return this.cutoff.bound(this.leases.keep(key, token, ms));
  }

  /** Until the next attempt (wake.ts): the server's queue, a NOTIFY, or a poll. */
  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    return sleepUntilChange(this.queue, this.notifier, this.sql, this.windowLeft, key, signal, maxMs);
  }

  /** Calls `onChange` on each grant and release of `key` (NOTIFY), and on a reconnect. */
  async watch(key: string, onChange: () => void): Promise<() => void> {
    checkFullKey(key);
    if (typeof onChange !== 'function') throw new InvalidArgumentError('watch: onChange must be a function');
    this.assertOpen();
    await this.ensureSchema();
    try {
      return await this.cutoff.bound(this.watches.watch(key, onChange));
    } catch (e) {
      throw backendError(e, 'watch');
    }
  }

  async inspect(key: string): Promise<LockInfo | null> {
    checkFullKey(key);
    this.assertOpen();
    const shown = this.ensureSchema().then(() => this.written()); // what this backend granted shows
    return this.cutoff.bound(shown.then(() => inspectKey(this.db, this.sql, this.config.timeoutMs, key)));
  }

  onLost(cb: LostCallback): void {
    if (typeof cb !== 'function') throw new InvalidArgumentError('onLost: callback must be a function');
    this.leases.lost.add(cb);
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

  /** @internal fromUrl made the pool (and ends it after close()): see closing(). */
  markOwned(): this {
    this.cutoff.owned = true;
    return this;
  }

  /** @internal close() gave the server up (fromUrl then ends its client without waiting). */
  get gaveUp(): boolean {
    return this.cutoff.gaveUp;
  }

  /**
   * The engine's close begins. On our own pool (its connections, and their locks, end with
   * close()) a call the server leaves unanswered CLOSE_GRACE_MS gives it up: no later call waits,
   * close() destroys the connections (src/cutoff.ts). A caller's pool is left alone.
   */
  closing(): void {
    if (!this.closed) this.cutoff.begin();
  }

  /**
   * Stops acquiring, ends waiting and watching, lets go of anything still held (the engine
   * released its leases first; windows live in rows) and gives the connections back.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const { cutoff } = this;
    this.watches.close();
    await cutoff.bound(this.notifier.close()).catch(() => {});
    this.rows.clear();
    this.queue.cancelAll();
    await cutoff.bound(Promise.allSettled([...this.pending])).catch(() => {});
    for (const h of [...this.leases.held.values()])
      if (h.state === 'held' && !cutoff.gaveUp) await cutoff.bound(this.leases.unlock(h)).catch(() => {});
    await cutoff.bound(Promise.allSettled([...this.pending])).catch(() => {});
    await this.giveBack();
  }

  /** Diagnostics (tests): grants out of the server's queue, NOTIFY messages received. */
  get stats(): { queueGrants: number; notifications: number } {
    return { queueGrants: this.queue.grants, notifications: this.notifier.messages };
  }

  /** Number of locks this backend holds (tests and diagnostics). */
  get size(): number {
    return this.leases.held.size;
  }

  /** The server pid of the dedicated connection, or null (tests and diagnostics). */
  get sessionPid(): number | null {
    const c = this.dedicated.current;
    return c && !c.closed ? (this.pids.get(c) ?? null) : null;
  }

  /** Creates the tables on first use (unless `migrate: false`); cached, retried after failure. */
  ensureSchema(): Promise<void> {
    return this.schema.ensure();
  }

  /** Closed, or something held, being acquired or waited for: the session stays. */
  private busy(): boolean {
    return this.closed || this.leases.held.size > 0 || this.acquiring.size > 0 || this.queue.size > 0;
  }

  private maybeIdle(): void {
    this.dedicated.maybeIdle();
  }

  /** Back to the pool, with no lock left on it (connect.ts: giveBackAll). */
  private giveBack(): Promise<void> {
    const conns = [this.dedicated.take(), ...this.queue.takeSpares()];
    return giveBackAll(conns, this.sql, this.config.timeoutMs, this.cutoff);
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
    return `PostgresBackend { client: '${this.db.kind}', held: ${this.leases.held.size}${this.closed ? ', closed' : ''} }`;
  }
  toJSON(): { name: string; client: string; held: number } {
    return { name: this.name, client: this.db.kind, held: this.leases.held.size };
  }
}
