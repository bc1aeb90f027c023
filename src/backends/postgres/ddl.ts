/**
 * The Postgres backend's tables (listed in sql.ts's header): whether they exist, and creating
 * them (the schema too), idempotently and serialised across processes. The statements that use
 * them are sql.ts's.
 */
import type { Queryable } from './client.js';
import { advisoryKey } from './keys.js';
import { EPOCH_SHIFT } from './sql.js';

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
 * What exists, read from the catalogs with the statement's MVCC snapshot rather than by
 * `to_regclass`/`to_regnamespace`: those go through the syscache, whose (negative) entries are
 * not refreshed inside a transaction that just waited for another one to create the objects.
 */
async function existing(q: Queryable, quotedSchema: string): Promise<{ schema: boolean; tables: number }> {
  const rows = await q.query(
    `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1)::int AS ns,
       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname = ANY ($2::text[]))::int AS tables`,
    [quotedSchema.slice(1, -1), `{${TABLES.join(',')}}`],
  );
  return { schema: Number(rows[0]?.ns) > 0, tables: Number(rows[0]?.tables) };
}

/** True when all tables exist (visible to this connection's snapshot). */
export async function tablesExist(q: Queryable, quotedSchema: string): Promise<boolean> {
  return (await existing(q, quotedSchema)).tables === TABLES.length;
}

/**
 * Creates the schema (if missing) and the tables inside the transaction `tx`, serialised by a
 * transaction-level advisory lock so concurrent first uses cannot collide. Idempotent. (Under
 * REPEATABLE READ the snapshot predates the wait: run `migrate()` beforehand.)
 */
export async function createTables(tx: Queryable, quotedSchema: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock($1::int8) IS NULL AS waited`, [MIGRATE_KEY]);
  const now = await existing(tx, quotedSchema);
  if (now.tables === TABLES.length) return;
  if (!now.schema) await tx.query(`CREATE SCHEMA IF NOT EXISTS ${quotedSchema}`);
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
