/**
 * `leasehold/postgres`: PostgreSQL advisory locks, in session mode (`postgres(pool)`, a Backend
 * for `createLocks`) and transaction mode (`xactLock`, `tryXactLock`), plus fencing at the
 * resource (`checkFence`). Works with `pg` (a Pool) and porsager's `postgres` (sql).
 * See docs/postgres.md.
 */
import { InvalidArgumentError } from '../../errors.js';
import { toMs, type Duration } from '../../duration.js';
import { adapt } from './adapt.js';
import { backendError, type PostgresClientLike } from './client.js';
import { checkOptions, describe, quoteIdent } from './keys.js';
import { PostgresBackend } from './session.js';
import { createTables, tablesExist } from './ddl.js';
import { statements } from './sql.js';
import { postgresAdmin } from './list.js';

export { advisoryKey, lockParts } from './keys.js';
export { xactLock, tryXactLock, checkFence, FenceEpochError } from './xact.js';
export type { XactLockOptions, CheckFenceOptions } from './xact.js';
export type { PostgresBackend } from './session.js';
export { TransactionPoolerError } from './connect.js';
export type {
  PgPoolLike,
  PostgresJsLike,
  PostgresClientLike,
  PgTransactionLike,
  PostgresJsTransactionLike,
  PostgresJsReservedLike,
  TransactionLike,
} from './client.js';

export interface PostgresOptions {
  /** Schema of the fence tables (created on first use unless `migrate: false`). Default `'public'`. */
  schema?: string;
  /** NOTIFY channel for release wake-ups (match `xactLock`'s `channel`). Default `'leasehold'`. */
  channel?: string;
  /** Bound on each network step: pool checkout, one statement, a liveness probe. Default `'10s'`. */
  timeout?: Duration;
  /** Create the tables on first use. Set false when the app user may not run DDL (use `migrate()`). */
  migrate?: boolean;
  /**
   * Declares that the pool reaches Postgres through a session-mode pooler (one server connection
   * per client connection for its whole life, e.g. PgBouncer `pool_mode = session`). Without it,
   * session locks are refused (`TransactionPoolerError`) on a connection whose server pid differs
   * from the one announced at connect, since a transaction pooler would share the locks' server
   * session with other clients. This is your promise: leasehold cannot tell the two pool modes
   * apart for sure. It still refuses an obvious transaction pooler (a sanity check when a second
   * connection is free) and ends a lease at once when its session's server pid changes.
   */
  pooler?: 'session';
}

const OPTIONS = ['schema', 'channel', 'timeout', 'migrate', 'pooler'] as const;

/**
 * A session-mode backend over the user's pool: a pg `Pool` or a postgres.js `sql`. One pooled
 * connection carries every lock it takes; a caller waiting for a lock waits in the server's lock
 * queue on one more (a waiter connection, which then carries that lock until release); LISTEN
 * takes one while anyone watches. `close()` gives them all back; it never ends the user's pool.
 */
export function postgres(poolOrSql: PostgresClientLike, opts?: PostgresOptions): PostgresBackend {
  const o = checkOptions(opts, OPTIONS, 'postgres()');
  const quotedSchema = quoteIdent(o.schema ?? 'public', 'postgres(): schema');
  const channel = (o.channel ?? 'leasehold') as string;
  quoteIdent(channel, 'postgres(): channel');
  const timeoutMs = toMs(o.timeout ?? '10s', 'postgres(): timeout');
  const autoMigrate = o.migrate ?? true;
  if (typeof autoMigrate !== 'boolean') {
    throw new InvalidArgumentError(`postgres(): migrate must be a boolean, got ${describe(autoMigrate)}`);
  }
  if (o.pooler !== undefined && o.pooler !== 'session') {
    throw new InvalidArgumentError(
      `postgres(): pooler must be 'session' (a session-mode pooler) or left out, got ${describe(o.pooler)}`,
    );
  }
  const pooler = o.pooler as 'session' | undefined;
  const db = adapt(poolOrSql);
  // the backend holds one connection as its lock session and runs its other statements (schema
  // check, holder rows, inspect) on the rest of the pool: a pool of one would wait on itself
  const max = (poolOrSql as { options?: { max?: unknown } }).options?.max;
  if (typeof max === 'number' && max < 2) {
    throw new InvalidArgumentError(
      `postgres(): the pool allows ${max} connection${max === 1 ? '' : 's'}; the backend holds one as its lock ` +
        'session and needs at least one more for its other statements: use max ≥ 2 (3 or more lets waiters ' +
        "queue in the server; a serverless function's pool of 1 can lock with xactLock inside its own transaction)",
    );
  }
  const backend = new PostgresBackend({ db, quotedSchema, channel, timeoutMs, autoMigrate, pooler });
  const admin = postgresAdmin(db, quotedSchema, channel);
  return Object.assign(backend, admin, {
    // what this backend granted shows in its own list (holder rows are written just after grants)
    async *list(prefix: string) {
      await backend.written();
      yield* admin.list(prefix);
    },
  });
}

/**
 * Creates the schema (if missing) and the tables, and records the fence epoch when none is
 * recorded since the fence sequence was last reset (a fresh install, a server crash), in its own
 * durable commit — what `xactLock` needs first (it throws `FenceEpochError` without it).
 * Idempotent and safe to run concurrently; needs CREATE privilege only when something is missing.
 */
export async function migrate(poolOrSql: PostgresClientLike, opts?: { schema?: string }): Promise<void> {
  const o = checkOptions(opts, ['schema'], 'migrate()');
  const quotedSchema = quoteIdent(o.schema ?? 'public', 'migrate(): schema');
  const db = adapt(poolOrSql);
  try {
    if (!(await tablesExist(db, quotedSchema))) await db.transaction((tx) => createTables(tx, quotedSchema));
    // one statement, its own commit (a no-op while the epoch's mark is there)
    await db.query(statements(quotedSchema).bumpEpoch);
  } catch (e) {
    throw backendError(e, 'migrate');
  }
}
