/**
 * The tables of the SQLite backend and every statement it runs. Keys, token digests, times and
 * values are always bound parameters; no SQL text is ever built from input.
 *
 *   leasehold_locks    key → fence (a counter that only grows), holder (SHA-256 of the token;
 *                      NULL when free), expires (host clock ms), value (holder value)
 *   leasehold_queue    the arrival queue: ticket (rowid: arrival order), key, holder, expires
 *                      (a waiter's place runs out unless it tries again)
 *   leasehold_results  idempotency results: key → value, expires (wall clock ms: it outlives reboots)
 *   leasehold_meta     name → value; `clock` records which clock the stored expiries use,
 *                      `fence_floor` the fence below which a new row never starts (FENCE_FLOOR)
 */
import type BetterSqlite3 from 'better-sqlite3';
import { BackendError } from '../../errors.js';
import { BOOT_ID_FILE, type HostClock } from './clock.js';

type Db = BetterSqlite3.Database;
type Stmt = BetterSqlite3.Statement<any[], any>;

/**
 * After a reboot every fence jumps by this much: with `synchronous = NORMAL` the last commits
 * before a power loss may be gone, and fences must never go backwards. Every lease holder lived
 * on this host and died with it, so only the counters need the jump.
 */
export const REBOOT_FENCE_JUMP = 2n ** 32n;

const DDL = `
CREATE TABLE IF NOT EXISTS leasehold_locks (
  key TEXT PRIMARY KEY, fence INTEGER NOT NULL, holder TEXT, expires INTEGER NOT NULL, value TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leasehold_queue (
  ticket INTEGER PRIMARY KEY, key TEXT NOT NULL, holder TEXT NOT NULL, expires INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS leasehold_queue_holder ON leasehold_queue (key, holder);
CREATE INDEX IF NOT EXISTS leasehold_queue_order ON leasehold_queue (key, ticket);
CREATE TABLE IF NOT EXISTS leasehold_results (
  key TEXT PRIMARY KEY, value TEXT NOT NULL, expires INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS leasehold_results_expires ON leasehold_results (expires);
CREATE TABLE IF NOT EXISTS leasehold_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
`;

/**
 * The first fence of a key's new row is `fence_floor + 1`. A row can be missing although the key
 * had fences before: a power loss took the unsynced commits that created it, or the file was
 * deleted and made again. The floor is seeded from the time in microseconds since 1970 when the file
 * (or a file of an older version, then at least its highest fence) first gets one, and it jumps
 * by REBOOT_FENCE_JUMP with the rows at every reboot, in the same synced commit.
 */
const FENCE_FLOOR = 'fence_floor';

/**
 * Creates what is missing and checks the clock. Runs inside a write transaction. A database last
 * written under another boot holds no live lease: holders and waiters are cleared and every fence,
 * and the floor of new rows, jumps by REBOOT_FENCE_JUMP. So does one last written on the wall
 * clock, once nothing in it is live by that clock (checkClockChange).
 */
export function migrate(db: Db, clock: HostClock): void {
  db.exec(DDL);
  const meta = (name: string) =>
    db.prepare(`SELECT value FROM leasehold_meta WHERE name = ?`).pluck().get(name) as string | undefined;
  const set = (name: string, value: string) =>
    db
      .prepare(
        `INSERT INTO leasehold_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
      )
      .run(name, value);
  const prev = meta('clock');
  const stored = meta(FENCE_FLOOR);
  if (prev === clock.id && stored !== undefined) return;
  if (prev !== undefined && prev !== clock.id) checkClockChange(db, prev, clock);
  let floor: bigint;
  if (stored !== undefined) floor = BigInt(stored);
  else {
    // a new file, or one an older version made (its new rows started at 1): the wall clock in µs,
    // and at least every fence the file holds
    const top = db.prepare(`SELECT max(fence) FROM leasehold_locks`).pluck().safeIntegers(true).get() as bigint | null;
    const wall = BigInt(Math.floor((performance.timeOrigin + performance.now()) * 1000));
    floor = top !== null && top > wall ? top : wall;
  }
  if (prev !== undefined && prev !== clock.id) {
    db.prepare(`UPDATE leasehold_locks SET holder = NULL, value = NULL, expires = 0, fence = fence + ?`).run(
      REBOOT_FENCE_JUMP,
    );
    db.prepare(`DELETE FROM leasehold_queue`).run();
    floor += REBOOT_FENCE_JUMP;
  }
  set(FENCE_FLOOR, String(floor));
  set('clock', clock.id);
}

/**
 * A change of the recorded clock is a reboot only between two boot ids. Otherwise a process that
 * reads no boot id (the wall clock) and one that does (the monotonic clock) are on one host: each
 * would read the other's expiries as long past (or decades away), and the one that opened the file
 * took it over, dropping the other's live leases. Refused, unless nothing in the file is live by
 * the wall clock it records (then wall-clock processes still running refuse to write: backend.ts).
 */
function checkClockChange(db: Db, prev: string, clock: HostClock): void {
  if (clock.monotonic && prev.startsWith('mono:')) return;
  const both =
    `processes that read the kernel's boot id (${BOOT_ID_FILE}) time leases by the monotonic clock, ` +
    'those that cannot by the wall clock, and they cannot share a lock file: give every process ' +
    'using it the boot id (a systemd unit with ProcSubset=pid has none), or use a file of its own';
  if (!clock.monotonic) {
    throw new BackendError(
      `sqlite: this process cannot read the boot id, and the file's leases are timed by the monotonic clock of boot ${prev.slice(5)}: ${both}`,
    );
  }
  const wall = Date.now();
  const live = db
    .prepare(
      `SELECT EXISTS (SELECT 1 FROM leasehold_locks WHERE holder IS NOT NULL AND expires > ?)
           OR EXISTS (SELECT 1 FROM leasehold_queue WHERE expires > ?)`,
    )
    .pluck()
    .get(wall, wall);
  if (live) {
    throw new BackendError(
      `sqlite: the file is in use by a process on the wall clock (one that cannot read the boot id): ${both}`,
    );
  }
}

export interface LockRow {
  holder: string | null;
  expires: number;
}
export interface QueueHead {
  ticket: number;
  holder: string;
  expires: number;
}
export interface InfoRow {
  fence: bigint;
  expires: number;
  value: string | null;
}
export interface PageRow extends InfoRow {
  key: string;
  live: number;
}
/** What a waiter needs to know, read in one statement (one snapshot). */
export interface PeekRow {
  /** 1 when nobody holds the lock (or the holder's time ran out), NULL when no row exists. */
  free: number | null;
  /** The holder's expiry, when held. */
  until: number | null;
  /** The first live waiter's holder digest. */
  head: string | null;
  /** 1 when the waiter `me` still has a live place in the queue. */
  queued: number;
  /** Live waiters ahead of `me`. */
  ahead: number;
}

/** The prepared statements of one connection. */
export class Statements {
  readonly lock: Stmt;
  readonly grant: Stmt;
  readonly head: Stmt;
  readonly dropTicket: Stmt;
  readonly leave: Stmt;
  readonly enqueue: Stmt;
  readonly extend: Stmt;
  readonly release: Stmt;
  readonly inspect: Stmt;
  readonly breakLock: Stmt;
  readonly pageFrom: Stmt;
  readonly pageAfter: Stmt;
  readonly peek: Stmt;
  readonly signature: Stmt;
  readonly dataVersion: Stmt;
  readonly clock: Stmt;
  readonly getResult: Stmt;
  readonly putResult: Stmt;
  readonly purgeResults: Stmt;

  constructor(db: Db) {
    this.lock = db.prepare(`SELECT holder, expires FROM leasehold_locks WHERE key = ?`);
    this.grant = db
      .prepare(
        `INSERT INTO leasehold_locks (key, fence, holder, expires, value)
         VALUES (?, coalesce((SELECT CAST(value AS INTEGER) FROM leasehold_meta WHERE name = '${FENCE_FLOOR}'), 0) + 1, ?, ?, ?)
         ON CONFLICT (key) DO UPDATE SET fence = fence + 1, holder = excluded.holder,
           expires = excluded.expires, value = excluded.value
         RETURNING fence`,
      )
      .pluck()
      .safeIntegers(true);
    this.head = db.prepare(`SELECT ticket, holder, expires FROM leasehold_queue WHERE key = ? ORDER BY ticket LIMIT 1`);
    this.dropTicket = db.prepare(`DELETE FROM leasehold_queue WHERE ticket = ?`);
    this.leave = db.prepare(`DELETE FROM leasehold_queue WHERE key = ? AND holder = ?`);
    this.enqueue = db.prepare(
      `INSERT INTO leasehold_queue (key, holder, expires) VALUES (?, ?, ?)
       ON CONFLICT (key, holder) DO UPDATE SET expires = excluded.expires`,
    );
    this.extend = db.prepare(`UPDATE leasehold_locks SET expires = ? WHERE key = ? AND holder = ? AND expires > ?`);
    this.release = db.prepare(
      `UPDATE leasehold_locks SET holder = NULL, value = NULL, expires = 0
       WHERE key = ? AND holder = ? AND expires > ?`,
    );
    this.inspect = db
      .prepare(`SELECT fence, expires, value FROM leasehold_locks WHERE key = ? AND holder IS NOT NULL AND expires > ?`)
      .safeIntegers(true);
    this.breakLock = db.prepare(
      `UPDATE leasehold_locks SET holder = NULL, value = NULL, expires = 0
       WHERE key = ? AND holder IS NOT NULL AND expires > ?`,
    );
    const page = (op: string) =>
      db
        .prepare(
          `SELECT key, fence, expires, value, holder IS NOT NULL AND expires > ? AS live
           FROM leasehold_locks WHERE key ${op} ? ORDER BY key LIMIT ?`,
        )
        .safeIntegers(true);
    this.pageFrom = page('>=');
    this.pageAfter = page('>');
    this.peek = db.prepare(
      `SELECT
         (SELECT holder IS NULL OR expires <= $now FROM leasehold_locks WHERE key = $key) AS free,
         (SELECT expires FROM leasehold_locks WHERE key = $key AND holder IS NOT NULL) AS until,
         (SELECT holder FROM leasehold_queue WHERE key = $key AND expires > $now ORDER BY ticket LIMIT 1) AS head,
         EXISTS (SELECT 1 FROM leasehold_queue WHERE key = $key AND holder = $me AND expires > $now) AS queued,
         (SELECT count(*) FROM leasehold_queue WHERE key = $key AND expires > $now
            AND ticket < (SELECT ticket FROM leasehold_queue WHERE key = $key AND holder = $me)) AS ahead`,
    );
    this.signature = db.prepare(
      `SELECT fence || ':' || (holder IS NOT NULL AND expires > ?) FROM leasehold_locks WHERE key = ?`,
    );
    this.signature.pluck();
    this.dataVersion = db.prepare(`PRAGMA data_version`).pluck();
    this.clock = db.prepare(`SELECT value FROM leasehold_meta WHERE name = 'clock'`).pluck();
    this.getResult = db.prepare(`SELECT value FROM leasehold_results WHERE key = ? AND expires > ?`).pluck();
    this.putResult = db.prepare(
      `INSERT INTO leasehold_results (key, value, expires) VALUES (?, ?, ?)
       ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires`,
    );
    this.purgeResults = db.prepare(
      `DELETE FROM leasehold_results WHERE key IN
         (SELECT key FROM leasehold_results WHERE expires <= ? ORDER BY expires LIMIT 32)`,
    );
  }

  /**
   * Inside each write of a process on the wall clock: a process on the monotonic clock may have
   * taken the file over since this one opened it (nothing was live then). No wall-clock expiry is
   * written beside theirs.
   */
  sameClock(clock: HostClock, op: string): void {
    if (this.clock.get() === clock.id) return;
    throw new BackendError(
      `sqlite: ${op}: this process cannot read the boot id, and a process that can took the file over ` +
        '(it times leases by the monotonic clock): the two cannot share a lock file (docs/sqlite.md)',
    );
  }
}
