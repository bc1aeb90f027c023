/**
 * The Postgres backend's tables (listed in sql.ts's header) and its one function
 * (`leasehold_after_wait`): whether they exist, and creating them (the schema too), idempotently
 * and serialised across processes. The statements that use them are sql.ts's.
 */
import type { Queryable } from './client.js';
import { advisoryKey } from './keys.js';
import { AFTER_WAIT_FN, EPOCH_SHIFT } from './sql.js';

/** Serialises concurrent migrations (and first-use creation) across processes. */
const MIGRATE_KEY = advisoryKey('leasehold/migrate').toString();

const TABLES = [
  'leasehold_fence_seq',
  'leasehold_fences',
  'leasehold_fence_seen',
  'leasehold_epoch',
  'leasehold_epoch_mark',
  'leasehold_holders',
  'leasehold_windows',
  'leasehold_results',
] as const;

/**
 * `waitLock`'s decision once its blocking `pg_advisory_lock` was granted ($1 advisory key, $2
 * key, $3 the fence sequence's OID as the waiter read it, $4 its epoch): the waiting statement's
 * snapshot predates the wait, so it cannot see a runExclusive window the holder committed just
 * before letting go. A VOLATILE plpgsql function takes a new snapshot for each query it runs
 * under READ COMMITTED, so its queries see that window: it answers `w<ms>` (a window is open:
 * the lock let go), 'sequence' (the sequence was dropped since: the lock let go), or the fence.
 * Under another isolation level the snapshot stays the transaction's: it answers 'waited' (the
 * lock kept) and the caller asks `afterWait`, a new statement. SECURITY INVOKER (the caller's
 * rights, as its own statements), search_path pinned to pg_catalog (then pg_temp), every table
 * named with its schema: nothing on the caller's path can stand in for what it calls.
 */
function afterWaitFunction(quotedSchema: string): string {
  const body = `DECLARE ms int8;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RETURN 'waited';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = p_seq) THEN
    PERFORM pg_catalog.pg_advisory_unlock(p_lk);
    RETURN 'sequence';
  END IF;
  SELECT GREATEST(0, ceil(extract(epoch FROM w.until - clock_timestamp()) * 1000))::int8 INTO ms
    FROM ${quotedSchema}.leasehold_windows w WHERE w.key = p_key AND w.until > clock_timestamp();
  IF FOUND THEN
    PERFORM pg_catalog.pg_advisory_unlock(p_lk);
    RETURN 'w' || ms;
  END IF;
  RETURN ((p_epoch << ${EPOCH_SHIFT}) + pg_catalog.nextval(p_seq::regclass))::text;
END`;
  // a plain literal (the schema name may hold $, which a dollar quote's tag could meet)
  return `CREATE OR REPLACE FUNCTION ${quotedSchema}.${AFTER_WAIT_FN}(p_lk int8, p_key text, p_seq oid, p_epoch int8)
    RETURNS text LANGUAGE plpgsql VOLATILE SECURITY INVOKER
    SET search_path = pg_catalog, pg_temp
    AS '${body.replace(/'/g, "''")}'`;
}

/**
 * What exists, read from the catalogs with the statement's MVCC snapshot rather than by
 * `to_regclass`/`to_regnamespace`: those go through the syscache, whose (negative) entries are
 * not refreshed inside a transaction that just waited for another one to create the objects.
 */
async function existing(q: Queryable, quotedSchema: string): Promise<{ schema: boolean; tables: number; fn: boolean }> {
  const rows = await q.query(
    `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1)::int AS ns,
       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname = ANY ($2::text[]))::int AS tables,
       (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = $1 AND p.proname = $3)::int AS fn`,
    [quotedSchema.slice(1, -1), `{${TABLES.join(',')}}`, AFTER_WAIT_FN],
  );
  return { schema: Number(rows[0]?.ns) > 0, tables: Number(rows[0]?.tables), fn: Number(rows[0]?.fn) > 0 };
}

/**
 * True when all tables exist (visible to this connection's snapshot), and the function too
 * unless `withFunction` is false (transaction mode, which does not use it: a schema made by an
 * earlier version, without it, needs no DDL there).
 */
export async function tablesExist(q: Queryable, quotedSchema: string, withFunction = true): Promise<boolean> {
  const now = await existing(q, quotedSchema);
  return now.tables === TABLES.length && (now.fn || !withFunction);
}

/**
 * Creates the schema (if missing), the tables and the function inside the transaction `tx`,
 * serialised by a transaction-level advisory lock so concurrent first uses cannot collide.
 * Idempotent. (Under REPEATABLE READ the snapshot predates the wait: run `migrate()` beforehand.)
 */
export async function createTables(tx: Queryable, quotedSchema: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock($1::int8) IS NULL AS waited`, [MIGRATE_KEY]);
  const now = await existing(tx, quotedSchema);
  if (now.tables === TABLES.length && now.fn) return;
  if (now.tables < TABLES.length) await createMissingTables(tx, quotedSchema, now.schema);
  // the tables may be an earlier version's, made before the function existed
  if (!now.fn) await tx.query(afterWaitFunction(quotedSchema));
}

async function createMissingTables(tx: Queryable, quotedSchema: string, schemaExists: boolean): Promise<void> {
  if (!schemaExists) await tx.query(`CREATE SCHEMA IF NOT EXISTS ${quotedSchema}`);
  const t = (name: string) => `${quotedSchema}.${name}`;
  const [had] = await tx.query(
    `SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relname = 'leasehold_fence_seq')::int AS seq,
     current_setting('server_version_num')::int AS v`,
    [quotedSchema.slice(1, -1)],
  );
  // UNLOGGED sequences exist from 15 on; before, a logged one (WAL every 32 values) is as safe
  const unlogged = Number(had?.v) >= 150000 ? 'UNLOGGED ' : '';
  for (const ddl of [
    // CACHE 1: every nextval goes through the one shared counter, so fences follow grant order;
    // NO CYCLE: 2^40 grants in one server start is an error, never a wrap-around
    `CREATE ${unlogged}SEQUENCE IF NOT EXISTS ${t('leasehold_fence_seq')} AS bigint MINVALUE 1
       MAXVALUE ${(1n << EPOCH_SHIFT) - 1n} NO CYCLE CACHE 1`,
    `CREATE TABLE IF NOT EXISTS ${t('leasehold_fences')} (key text PRIMARY KEY, fence bigint NOT NULL) WITH (fillfactor = 70)`,
    `CREATE TABLE IF NOT EXISTS ${t('leasehold_fence_seen')} (resource text PRIMARY KEY, fence bigint NOT NULL) WITH (fillfactor = 70)`,
    `CREATE TABLE IF NOT EXISTS ${t('leasehold_epoch')} (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL, started timestamptz NOT NULL)`,
    // emptied by crash recovery together with the sequence: a missing row means "bump first"
    `CREATE UNLOGGED TABLE IF NOT EXISTS ${t('leasehold_epoch_mark')} (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL)`,
    // lk: the advisory key, for list's join with pg_locks
    `CREATE UNLOGGED TABLE IF NOT EXISTS ${t('leasehold_holders')} (key text PRIMARY KEY, fence bigint NOT NULL,
       pid int NOT NULL, value text, lk bigint NOT NULL, attn timestamptz)
       WITH (fillfactor = 70)`,
    `CREATE TABLE IF NOT EXISTS ${t('leasehold_windows')} (key text PRIMARY KEY, until timestamptz NOT NULL, fence bigint NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS ${t('leasehold_results')} (key text PRIMARY KEY, value text NOT NULL, expires timestamptz NOT NULL)`,
  ]) {
    await tx.query(ddl);
  }
  if (Number(had?.seq) === 0) {
    // A new sequence counts from 1 again (fences came from per-key counters until the shared
    // sequence existed, or the sequence was dropped): no mark, so the next `bumpEpoch` puts every
    // fence of the new sequence above the earlier ones, in its own durable commit
    await tx.query(`DELETE FROM ${t('leasehold_epoch_mark')}`);
  }
}
