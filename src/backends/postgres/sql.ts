/**
 * Every statement the Postgres backend sends, and the schema it needs.
 *
 * Tables (in `schema`, default `public`):
 *   leasehold_fences      (key text PRIMARY KEY, fence bigint)       one counter per namespaced key
 *   leasehold_fence_seen  (resource text PRIMARY KEY, fence bigint)  highest fence a resource accepted
 *
 * Only a validated, double-quoted schema name is spliced into SQL text; keys, fences, advisory
 * keys and channels are bound parameters. `int8` values travel as decimal strings and come back
 * as `::text`, so user type parsers (int8 → number) cannot lose precision.
 */
import type { Queryable } from './client.js';
import { advisoryKey } from './keys.js';

/** Serialises concurrent migrations (and first-use creation) across processes. */
const MIGRATE_KEY = advisoryKey('leasehold/migrate').toString();

export interface Statements {
  readonly fences: string;
  readonly seen: string;
  /** $1 advisory key, $2 key → one row { fence, pid } when granted (fence bumped), none when held. */
  readonly acquire: string;
  /** $1 classid, $2 objid → { held } for this connection. */
  readonly probe: string;
  /** $1 advisory key, $2 channel → { ok }; NOTIFY (delivered at commit, after the unlock) when ok. */
  readonly release: string;
  /** $1 advisory key, $2 classid, $3 objid: unlocks only if this connection holds it (no WARNING). */
  readonly unlockIfHeld: string;
  /** $1 key, $2 classid, $3 objid → { fence, held }. */
  readonly inspect: string;
  /** $1 advisory key, $2 key, $3 channel → { fence }; waits for the lock. NOTIFY at COMMIT. */
  readonly xactLock: string;
  /** Same, without waiting: no row when the lock is held elsewhere. */
  readonly tryXactLock: string;
  /** $1 resource, $2 fence → a row when accepted (fence ≥ highest seen), none when stale. */
  readonly checkFence: string;
  /** $1 resource → { fence } the highest seen. */
  readonly highestSeen: string;
  /** $1 prefix → { n } rows in the fence table under a key prefix. */
  readonly countKeys: string;
}

const cache = new Map<string, Statements>();

/** The statements for one (already quoted) schema. */
export function statements(quotedSchema: string): Statements {
  let s = cache.get(quotedSchema);
  if (s) return s;
  const fences = `${quotedSchema}.leasehold_fences`;
  const seen = `${quotedSchema}.leasehold_fence_seen`;
  // The CTE holding the volatile lock call is materialised and scanned exactly once, before the
  // INSERT sees a row, so the counter is bumped only when (and after) the lock was granted. ON
  // CONFLICT DO UPDATE (READ COMMITTED) increments the latest committed row even when it was
  // committed after this statement's snapshot, e.g. by the holder we just waited for. A session
  // that runs with synchronous_commit = off is raised to `local` for this one commit, so an
  // issued fence survives a server crash.
  const bump = `ON CONFLICT (key) DO UPDATE SET fence = f.fence + 1`;
  const durable = `d AS (SELECT CASE WHEN current_setting('synchronous_commit') = 'off'
      THEN set_config('synchronous_commit', 'local', true) END AS s)`;
  const inPgLocks = (classid: string, objid: string) =>
    `locktype = 'advisory' AND classid = ${classid}::int8::oid AND objid = ${objid}::int8::oid AND objsubid = 1 AND granted`;
  s = {
    fences,
    seen,
    acquire: `WITH l AS (SELECT pg_try_advisory_lock($1::int8) AS got), ${durable}
      INSERT INTO ${fences} AS f (key, fence) SELECT $2::text, 1 FROM l, d WHERE l.got
      ${bump} RETURNING f.fence::text AS fence, pg_backend_pid() AS pid`,
    probe: `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND ${inPgLocks('$1', '$2')}) AS held`,
    release: `WITH u AS (SELECT pg_advisory_unlock($1::int8) AS ok)
      SELECT u.ok, CASE WHEN u.ok THEN pg_notify($2::text, $1::int8::text) END AS n FROM u`,
    unlockIfHeld: `SELECT count(*)::int AS n FROM (SELECT pg_advisory_unlock($1::int8) FROM pg_locks
      WHERE pid = pg_backend_pid() AND ${inPgLocks('$2', '$3')}) u`,
    inspect: `SELECT (SELECT fence::text FROM ${fences} WHERE key = $1::text) AS fence,
      EXISTS (SELECT 1 FROM pg_locks WHERE ${inPgLocks('$2', '$3')}
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) AS held`,
    xactLock: `WITH l AS (SELECT pg_advisory_xact_lock($1::int8) IS NULL AS waited), ${durable}
      INSERT INTO ${fences} AS f (key, fence) SELECT $2::text, 1 FROM l, d
      ${bump} RETURNING f.fence::text AS fence, pg_notify($3::text, $1::int8::text) AS n`,
    tryXactLock: `WITH l AS (SELECT pg_try_advisory_xact_lock($1::int8) AS got), ${durable}
      INSERT INTO ${fences} AS f (key, fence) SELECT $2::text, 1 FROM l, d WHERE l.got
      ${bump} RETURNING f.fence::text AS fence, pg_notify($3::text, $1::int8::text) AS n`,
    checkFence: `INSERT INTO ${seen} AS t (resource, fence) VALUES ($1::text, $2::int8)
      ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence WHERE excluded.fence >= t.fence
      RETURNING t.fence::text AS fence`,
    highestSeen: `SELECT fence::text AS fence FROM ${seen} WHERE resource = $1::text`,
    countKeys: `SELECT count(*)::int AS n FROM ${fences} WHERE starts_with(key, $1::text)`,
  };
  cache.set(quotedSchema, s);
  return s;
}

/**
 * What exists, read from the catalogs with the statement's MVCC snapshot rather than by
 * `to_regclass`/`to_regnamespace`: those go through the syscache, whose (negative) entries are
 * not refreshed inside a transaction that just waited for another one to create the objects.
 */
async function existing(q: Queryable, quotedSchema: string): Promise<{ schema: boolean; tables: number }> {
  const rows = await q.query(
    `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1)::int AS ns,
       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname IN ('leasehold_fences', 'leasehold_fence_seen'))::int AS tables`,
    [quotedSchema.slice(1, -1)],
  );
  return { schema: Number(rows[0]?.ns) > 0, tables: Number(rows[0]?.tables) };
}

/** True when both tables exist (visible to this connection's snapshot). */
export async function tablesExist(q: Queryable, quotedSchema: string): Promise<boolean> {
  return (await existing(q, quotedSchema)).tables === 2;
}

/**
 * Creates the schema (if missing) and both tables inside the transaction `tx`, serialised by a
 * transaction-level advisory lock so concurrent first uses cannot collide. Idempotent. (Under
 * REPEATABLE READ the snapshot predates the wait: run `migrate()` beforehand.)
 */
export async function createTables(tx: Queryable, quotedSchema: string): Promise<void> {
  const s = statements(quotedSchema);
  await tx.query(`SELECT pg_advisory_xact_lock($1::int8) IS NULL AS waited`, [MIGRATE_KEY]);
  const now = await existing(tx, quotedSchema);
  if (now.tables === 2) return;
  if (!now.schema) await tx.query(`CREATE SCHEMA IF NOT EXISTS ${quotedSchema}`);
  await tx.query(
    `CREATE TABLE IF NOT EXISTS ${s.fences} (key text PRIMARY KEY, fence bigint NOT NULL) WITH (fillfactor = 70)`,
  );
  await tx.query(
    `CREATE TABLE IF NOT EXISTS ${s.seen} (resource text PRIMARY KEY, fence bigint NOT NULL) WITH (fillfactor = 70)`,
  );
}
