/**
 * `leasehold/sqlite`: locks for the processes of one host, in one SQLite file — no server. On
 * better-sqlite3 (an optional peer dependency). WAL, every write one `BEGIN IMMEDIATE`
 * transaction, a fair ticket queue, wake-ups by `PRAGMA data_version` polling across processes
 * and at once within one. See docs/sqlite.md.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { toMs, type Duration } from '../../duration.js';
import { BackendError, InvalidArgumentError, LeaseholdError } from '../../errors.js';
import { checkOptions } from '../../validate.js';
import { SqliteBackend, type SqliteDatabase } from './backend.js';
import { fileId } from './identity.js';

export { SqliteBackend, type SqliteDatabase } from './backend.js';
export { defaultPath, pathFromUrl } from './url.js';

export interface SqliteOptions {
  /**
   * Slowest `PRAGMA data_version` poll while anyone waits or watches (default `'20ms'`): how soon
   * another process's release is noticed by a waiter far back in the queue, and a change by an
   * observer. The head of the queue polls every millisecond, the n-th in line every n ms.
   */
  pollInterval?: Duration;
  /**
   * How long one operation keeps retrying (asynchronously) while another process holds the
   * database's write lock, before it fails with a BackendError (default `'5s'`).
   */
  busyTimeout?: Duration;
  /**
   * `'normal'` (default): commits are not fsynced; a power loss may lose the last ones, so after
   * a reboot every fence jumps by 2^32 and never goes backwards. `'full'`: an fsync per commit.
   */
  synchronous?: 'normal' | 'full';
  /** Create the database's directory if it is missing (default true; for a path only). */
  mkdir?: boolean;
}

const OPTIONS = ['pollInterval', 'busyTimeout', 'synchronous', 'mkdir'] as const;

const isDatabase = (x: unknown): x is SqliteDatabase => {
  const d = x as Record<string, unknown> | null;
  return (
    !!d &&
    typeof d === 'object' &&
    typeof d.prepare === 'function' &&
    typeof d.pragma === 'function' &&
    typeof d.transaction === 'function'
  );
};

/**
 * A backend on a SQLite database file (every process of the host that opens the same file
 * shares its locks), or on a better-sqlite3 connection you opened (then it is yours to close; it
 * is switched to WAL, and its own `busy_timeout` still applies).
 */
export function sqlite(pathOrDb: string | SqliteDatabase, options?: SqliteOptions): SqliteBackend {
  const o = checkOptions<SqliteOptions>(options, OPTIONS, 'sqlite');
  const pollMs = o.pollInterval === undefined ? 20 : toMs(o.pollInterval, 'sqlite: pollInterval');
  const busyMs = o.busyTimeout === undefined ? 5000 : toMs(o.busyTimeout, 'sqlite: busyTimeout');
  const synchronous = o.synchronous ?? 'normal';
  if (synchronous !== 'normal' && synchronous !== 'full') {
    throw new InvalidArgumentError(`sqlite: synchronous must be 'normal' or 'full'`);
  }
  if (o.mkdir !== undefined && typeof o.mkdir !== 'boolean')
    throw new InvalidArgumentError('sqlite: mkdir must be a boolean');
  if (isDatabase(pathOrDb)) {
    if (!pathOrDb.open) throw new InvalidArgumentError('sqlite: the database connection is closed');
    if (pathOrDb.readonly) throw new InvalidArgumentError('sqlite: the database connection is read-only');
    return new SqliteBackend({ db: pathOrDb, owned: false, pollMs, busyMs, synchronous });
  }
  if (typeof pathOrDb !== 'string' || pathOrDb.length === 0 || pathOrDb.includes('\u0000')) {
    throw new InvalidArgumentError('sqlite: the first argument must be a file path or a better-sqlite3 Database');
  }
  if (pathOrDb !== ':memory:' && (o.mkdir ?? true)) {
    try {
      mkdirs(dirname(pathOrDb));
    } catch (e) {
      throw new BackendError(`sqlite: cannot create the directory of ${pathOrDb}: ${(e as Error).message}`, {
        cause: e,
      });
    }
  }
  let db: SqliteDatabase;
  try {
    // busy_timeout 0: a locked database is retried asynchronously, never waited for in SQLite
    db = new Database(pathOrDb, { timeout: 0 });
  } catch (e) {
    // better-sqlite3 resolves but its native part was never built (installed without running its
    // install script): not the database file's fault, and `bindings` lists every path it tried
    if (/bindings file|better_sqlite3\.node/.test(String((e as Error)?.message))) {
      throw new LeaseholdError(
        'LEASEHOLD_MISSING_PEER',
        'sqlite: better-sqlite3 is installed but not built (its install script did not run): run ' +
          '`npm rebuild better-sqlite3`, or allow the script in package.json: "allowScripts": { "better-sqlite3": true }',
        { cause: e },
      );
    }
    throw new BackendError(`sqlite: cannot open ${pathOrDb}: ${(e as Error).message}`, { cause: e });
  }
  // the file it opened (relative to the working directory now), for the check that the path
  // still names it; not for an in-memory or temporary database
  const file = pathOrDb === ':memory:' || db.memory ? undefined : resolve(pathOrDb);
  // the file SQLite has just opened: the path must still name it at the first use (identity.ts)
  const opened = file === undefined ? undefined : fileId(file);
  return new SqliteBackend({ db, owned: true, pollMs, busyMs, synchronous, file, opened });
}

/**
 * Creates `dir` and its missing parents, one level at a time from the nearest one that exists.
 * Not `mkdirSync(dir, { recursive: true })`: on Node 20 that loops forever, blocking the event
 * loop, under a parent that refuses new entries with ENOENT (procfs: `/proc/x/y.db`).
 */
function mkdirs(dir: string): void {
  const missing: string[] = [];
  for (let d = resolve(dir); !existsSync(d); d = dirname(d)) {
    missing.push(d);
    if (dirname(d) === d) break;
  }
  for (const d of missing.reverse()) {
    try {
      mkdirSync(d);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e; // made meanwhile by another process
    }
  }
}
