/**
 * The SQLite driver: one connection per backend, every write one short `BEGIN IMMEDIATE`
 * transaction. A database another process is writing is retried asynchronously (SQLite's own
 * busy handler would block the event loop and starve processes), and waiting is the fair ticket
 * queue plus the wake-ups of watch.ts.
 */
import { realpathSync } from 'node:fs';
import { inspect } from 'node:util';
import type BetterSqlite3 from 'better-sqlite3';
import type { AcquireRequest, Backend, ExtendItem, Grant, LockInfo, ResultStore } from '../../backend.js';
import { BackendError, ClosedError, LeaseholdError } from '../../errors.js';
import { digest } from '../../hash.js';
import { now as monotonic, sleep } from '../../wait.js';
import { hostClock, type HostClock } from './clock.js';
import { FileIdentity, type FileId } from './identity.js';
import { migrate, Statements, type InfoRow, type LockRow, type PageRow, type QueueHead } from './schema.js';
import { announce, joinHub, Poller, type Waiter } from './watch.js';

/** How long a waiter's place in the queue lasts unless it tries again (as Redis's `placeTtl`). */
export const PLACE_MS = 3000;
/** A waiting caller tries again (renewing its place) at least this often. */
const PLACE_REFRESH_MS = PLACE_MS / 3;

type Db = BetterSqlite3.Database;

/**
 * What the backend uses of a better-sqlite3 `Database`, described rather than imported, so the
 * types of `leasehold/sqlite` load without better-sqlite3's type package.
 */
export interface SqliteDatabase {
  readonly name: string;
  readonly memory: boolean;
  readonly open: boolean;
  readonly readonly: boolean;
  readonly inTransaction: boolean;
  prepare(source: string): unknown;
  pragma(source: string, options?: { simple?: boolean }): unknown;
  transaction(fn: (...args: any[]) => unknown): unknown;
  exec(source: string): unknown;
  close(): unknown;
}

export interface SqliteConfig {
  readonly db: SqliteDatabase;
  /** The backend opened `db` (and closes it). */
  readonly owned: boolean;
  readonly pollMs: number;
  readonly busyMs: number;
  readonly synchronous: 'normal' | 'full';
  /**
   * The file `db` was opened from (absolute), when the backend opened it by path: every call
   * checks that the path still names it (identity.ts).
   */
  readonly file?: string;
  /**
   * The file `file` named when `db` was opened (null: none), which the path must still name at
   * the first use: SQLite opens the `-wal` and `-shm` then, by name. Taken then when left out.
   */
  readonly opened?: FileId | null;
}

/** Rows per page of `list`. */
const PAGE = 256;
let anonymous = 0;

/** The token is never stored: only its SHA-256 (the database file is readable by its users). */
const digestOf = (token: string): string => digest('sha256', token).toString('base64url');

const isBusy = (e: unknown): boolean => {
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
};

function databaseId(db: Db): string {
  if (db.memory) return `memory:${++anonymous}`;
  try {
    return realpathSync(db.name);
  } catch {
    return db.name;
  }
}

export class SqliteBackend implements Backend {
  readonly name = 'sqlite';
  /** Push only within this process; other processes are seen by data_version polling. */
  readonly capabilities = { push: false, fair: true, value: true, results: true, session: false } as const;
  readonly results: ResultStore = {
    get: (lockKey) =>
      this.read('result', () => (this.st!.getResult.get(lockKey, Date.now()) as string | undefined) ?? null),
    put: (lockKey, token, value, ttlMs) =>
      this.write('result', () => {
        const row = this.st!.lock.get(lockKey) as LockRow | undefined;
        if (!row || row.holder !== digestOf(token) || row.expires <= this.clock.now()) return false;
        const wall = Date.now();
        this.st!.purgeResults.run(wall);
        this.st!.putResult.run(lockKey, value, wall + ttlMs);
        return true;
      }),
  };
  readonly db: SqliteDatabase;
  private readonly clock: HostClock = hostClock();
  private readonly id: string;
  private st: Statements | null = null;
  private poller: Poller | null = null;
  private opening: Promise<void> | null = null;
  private leaveHub: (() => void) | null = null;
  private identity: FileIdentity | null = null;
  /** What happened to the file under this backend (deleted, replaced): every call fails since. */
  private gone: string | null = null;
  private readonly tx: <T>(fn: () => T) => T;
  /** Per key: the holder digest of this backend's refused waiter (one acquire per key at a time). */
  private readonly refusals = new Map<string, string>();
  private closed = false;

  constructor(private readonly config: SqliteConfig) {
    this.db = config.db;
    const db = config.db as unknown as Db;
    this.id = databaseId(db);
    const run = db.transaction((fn: () => unknown) => fn());
    this.tx = run.immediate as <T>(fn: () => T) => T;
  }

  /** Opens the database for use: WAL, the tables, the clock check. Every call waits for it. */
  init(): Promise<void> {
    // a backend closed before its first use opens nothing: its calls get ClosedError
    if (this.closed && !this.opening) return Promise.reject(new ClosedError('this sqlite backend is closed'));
    // a failed open (a database another process kept locked past busyTimeout) is not kept: the
    // next call opens again (open() is safe to re-run)
    this.opening ??= this.open().catch((e: unknown) => {
      if (!this.closed) this.opening = null;
      throw e;
    });
    return this.opening;
  }

  private async open(): Promise<void> {
    const db = this.db as unknown as Db;
    const { file, opened } = this.config;
    // before the first statement opens the -wal and -shm the path names: the connection holds the
    // file the path named when it was made, and must not pair it with another file's -wal
    if (file !== undefined) {
      this.identity = FileIdentity.take(file, opened);
      this.fileGone('open', true);
    }
    if (!db.memory) {
      const mode = await this.retry('open', () => db.pragma('journal_mode = WAL', { simple: true }));
      if (String(mode).toLowerCase() !== 'wal') {
        throw new BackendError(`sqlite: could not switch ${db.name} to WAL (journal_mode is ${String(mode)})`);
      }
    }
    // the clock check is a rare write that must survive a power loss: one synced commit; on a
    // connection the caller passed, its own setting is never lowered (its transactions share it)
    const theirs = this.config.owned ? 0 : Number(db.pragma('synchronous', { simple: true }));
    db.pragma('synchronous = FULL');
    await this.retry('open', () => this.tx(() => migrate(db, this.clock)));
    const ours = this.config.synchronous === 'normal' && this.clock.monotonic ? 1 : 2; // NORMAL : FULL
    const level = Math.max(ours, theirs);
    if (level !== 2) db.pragma(`synchronous = ${level}`);
    // the connection has read the database: its -wal and -shm exist and are the ones it uses
    if (file !== undefined) this.identity = FileIdentity.take(file, opened);
    this.st = new Statements(db);
    this.poller = new Poller(this.st, this.clock, this.config.pollMs);
    this.leaveHub = joinHub(this.id, (key) => this.poller?.changed(key));
  }

  async acquire(key: string, req: AcquireRequest): Promise<Grant | null> {
    const me = digestOf(req.token);
    const fence = await this.write('acquire', () => {
      const st = this.st!;
      const now = this.clock.now();
      const row = st.lock.get(key) as LockRow | undefined;
      if (!row || row.holder === null || row.expires <= now) {
        const head = this.liveHead(key, now);
        if (head === null || head.holder === me) {
          if (head) st.dropTicket.run(head.ticket);
          return st.grant.get(key, me, now + req.ttlMs, req.value ?? null) as bigint;
        }
      }
      // a place lasts PLACE_MS whatever the TTL (a dead waiter holds up a free lock no longer);
      // a live waiter tries again, renewing it, within a third of that (waitForChange)
      if (req.queue) st.enqueue.run(key, me, now + Math.min(req.ttlMs, PLACE_MS));
      return null;
    });
    if (fence === null) {
      if (req.queue) this.refusals.set(key, me);
      return null;
    }
    if (this.refusals.get(key) === me) this.refusals.delete(key);
    announce(this.id, key);
    return { fence };
  }

  /** The first waiter whose place has not run out (expired places at the front are dropped). */
  private liveHead(key: string, now: number): QueueHead | null {
    for (let i = 0; i < 64; i++) {
      const head = this.st!.head.get(key) as QueueHead | undefined;
      if (!head) return null;
      if (head.expires > now) return head;
      this.st!.dropTicket.run(head.ticket);
    }
    return (this.st!.head.get(key) as QueueHead | undefined) ?? null;
  }

  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    if (items.length === 0) return [];
    // the file gone, no lease of this backend is in the file at its path any more: refused
    const refused = () => items.map(() => false);
    return this.write(
      'extend',
      () => {
        const now = this.clock.now();
        return items.map(
          ({ key, token, ttlMs }) => this.st!.extend.run(now + ttlMs, key, digestOf(token), now).changes === 1,
        );
      },
      refused,
    );
  }

  async release(key: string, token: string): Promise<boolean> {
    const ok = await this.write(
      'release',
      () => this.st!.release.run(key, digestOf(token), this.clock.now()).changes === 1,
      () => false, // the file gone: not held there (extend says why)
    );
    if (ok) announce(this.id, key);
    return ok;
  }

  async leave(key: string, token: string): Promise<void> {
    const me = digestOf(token);
    if (this.refusals.get(key) === me) this.refusals.delete(key);
    const left = await this.write('leave', () => this.st!.leave.run(key, me).changes === 1);
    if (left) announce(this.id, key);
  }

  async waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted || this.closed) return;
    await this.init();
    const poller = this.poller;
    if (!poller || this.closed) return;
    const me = this.refusals.get(key) ?? null;
    let seen;
    try {
      seen = poller.look(key, me);
    } catch {
      return sleep(Math.min(maxMs, this.config.pollMs), signal); // the next attempt reports the error
    }
    if (seen.wake) return;
    // an expiry commits nothing: wake at the holder's expiry at the latest; and soon enough to
    // renew this waiter's place before it runs out
    const most = Math.min(maxMs, PLACE_REFRESH_MS);
    const bound = seen.until === null ? most : Math.min(most, Math.max(1, seen.until - this.clock.now() + 1));
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        poller.remove(w);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const w: Waiter = { key, me, interval: seen.interval, wake: done };
      const timer = setTimeout(done, bound);
      signal.addEventListener('abort', done, { once: true });
      poller.add(w);
    });
  }

  async inspect(key: string): Promise<LockInfo | null> {
    const row = await this.read('inspect', () => this.st!.inspect.get(key, this.clock.now()) as InfoRow | undefined);
    return row ? this.info(key, row) : null;
  }

  async *list(prefix: string): AsyncIterable<LockInfo> {
    let after: string | null = null;
    for (;;) {
      const from: string | null = after;
      const rows: PageRow[] = await this.read('list', (): PageRow[] => {
        const now = this.clock.now();
        const st = this.st!;
        return (from === null ? st.pageFrom.all(now, prefix, PAGE) : st.pageAfter.all(now, from, PAGE)) as PageRow[];
      });
      for (const r of rows) {
        if (!r.key.startsWith(prefix)) return;
        if (Number(r.live) === 1) yield this.info(r.key, r);
      }
      if (rows.length < PAGE) return;
      after = rows[rows.length - 1]!.key;
    }
  }

  async watch(key: string, onChange: () => void): Promise<() => void> {
    await this.init();
    this.assertOpen();
    return this.poller!.watch(key, onChange);
  }

  /** Administrative break: frees `key` whoever holds it; resolves what it broke (null: nothing held). */
  async forceRelease(key: string): Promise<LockInfo | null> {
    const row = await this.write('forceRelease', () => {
      const now = this.clock.now();
      const held = this.st!.inspect.get(key, now) as InfoRow | undefined;
      if (held) this.st!.breakLock.run(key, now);
      return held;
    });
    if (!row) return null;
    announce(this.id, key);
    return this.info(key, row);
  }

  /** The file and state only: never the connection or the waiters' digests. */
  [inspect.custom](): string {
    return `SqliteBackend { file: ${JSON.stringify(this.db.name)}${this.closed ? ', closed' : ''} }`;
  }
  toJSON(): { name: string; file: string } {
    return { name: this.name, file: this.db.name };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.opening?.catch(() => {});
    this.leaveHub?.();
    this.poller?.stop();
    if (this.config.owned && this.db.open) this.db.close();
  }

  private info(key: string, row: InfoRow): LockInfo {
    const info: LockInfo = {
      key,
      fence: BigInt(row.fence),
      remainingMs: Math.max(0, Number(row.expires) - this.clock.now()),
    };
    return row.value === null || row.value === undefined ? info : { ...info, value: String(row.value) };
  }

  private assertOpen(): void {
    if (this.closed) throw new ClosedError('this sqlite backend is closed');
  }

  /**
   * One write transaction (BEGIN IMMEDIATE … COMMIT), retried while another process writes.
   * When the file was deleted or replaced: `moved()`, else a BackendError, never a write.
   */
  private async write<T>(op: string, fn: () => T, moved?: () => T): Promise<T> {
    if (!this.st) await this.init();
    return this.retry(op, () => {
      if (this.db.inTransaction) {
        throw new BackendError(`sqlite: ${op}: the connection is inside a transaction of its own`);
      }
      if (this.identity && this.fileGone(op, !moved)) return moved!();
      // on the wall clock: a process that reads the boot id may have taken the file over (schema.ts)
      return this.tx(this.clock.monotonic ? fn : () => (this.st!.sameClock(this.clock, op), fn()));
    });
  }

  private async read<T>(op: string, fn: () => T): Promise<T> {
    if (!this.st) await this.init();
    return this.retry(op, () => {
      if (this.identity) this.fileGone(op, true);
      return fn();
    });
  }

  /**
   * Whether the path no longer names the files this connection uses (looked at before a call, at
   * most once a millisecond: identity.ts). Writing on would be writing to a file no one else reads, or one SQLite's
   * other connections no longer lock with: every lease of this backend is lost, and the next
   * process to open the path grants them again. Not transient: it never passes by itself.
   */
  private fileGone(op: string, raise: boolean): boolean {
    this.gone ??= this.identity!.changed();
    if (this.gone === null) return false;
    if (!raise) return true;
    throw new BackendError(
      `sqlite: ${op}: ${this.gone} while this backend had it open; its leases are lost, and processes ` +
        'that open the path now use other files. Stop every process using it, then open it again (docs/sqlite.md)',
    );
  }

  /**
   * Runs `attempt` (synchronous, short) until it does not meet a locked database, pausing
   * asynchronously in between — never in SQLite's busy handler, which would block the event
   * loop — for at most `busyMs`.
   */
  private async retry<T>(op: string, attempt: () => T): Promise<T> {
    let started = 0;
    for (let n = 0; ; n++) {
      this.assertOpen();
      try {
        return attempt();
      } catch (e) {
        if (e instanceof LeaseholdError) throw e;
        if (!isBusy(e)) throw new BackendError(`sqlite: ${op} failed: ${(e as Error).message}`, { cause: e });
        const t = monotonic();
        if (n === 0) started = t;
        else if (t - started >= this.config.busyMs) {
          throw new BackendError(
            `sqlite: ${op}: the database stayed locked for ${this.config.busyMs}ms (another process keeps a write transaction open)`,
            { cause: e },
          );
        }
        if (n < 3) await new Promise((r) => setImmediate(r));
        else await sleep(1 + Math.random() * Math.min(20, 2 ** (n - 3)));
      }
    }
  }
}
