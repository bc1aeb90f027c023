/**
 * Behind PgBouncer in transaction pooling mode (scripts/services.d/pgbouncer.sh, 127.0.0.1:6432):
 * session locks are refused with a clear error (any pooler not declared session-mode is; see
 * poolers.test.ts for round robin and for `pooler: 'session'`); xactLock, tryXactLock and checkFence work, and
 * exclude correctly across 8 processes. A missing PgBouncer fails the run (it is never skipped).
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import postgresJs from 'postgres';
import { afterAll, describe, expect, test } from 'vitest';
import { createLocks } from '../../src/index.js';
import {
  advisoryKey,
  checkFence,
  lockParts,
  migrate,
  postgres,
  tryXactLock,
  xactLock,
} from '../../src/backends/postgres/index.js';
import { Relay } from './proxy.js';
import { Pg, PG_URL } from './support.js';

const BOUNCER_URL = process.env.LEASEHOLD_PGBOUNCER_URL ?? 'postgres://postgres@127.0.0.1:6432/test';
const run = promisify(execFile);
const env = new Pg();
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  await Promise.allSettled(closers.map((f) => f()));
  await env.closeAll();
});

const uid = () => randomUUID().slice(0, 8);

async function bouncerPool(max = 4): Promise<pg.Pool> {
  const pool = new pg.Pool({ connectionString: BOUNCER_URL, max, connectionTimeoutMillis: 3000 });
  pool.on('error', () => {});
  await pool.query('select 1').catch((e: Error) => {
    void pool.end();
    throw new Error(`PgBouncer at ${BOUNCER_URL} is not reachable (run scripts/services.sh): ${e.message}`);
  });
  closers.push(() => pool.end());
  return pool;
}

async function bouncerSql(): Promise<postgresJs.Sql> {
  // prepare: false — a transaction pooler cannot keep named prepared statements across transactions
  const sql = postgresJs(BOUNCER_URL, { max: 4, prepare: false, connect_timeout: 3, onnotice: () => {} });
  closers.push(() => sql.end({ timeout: 2 }));
  return sql;
}

/**
 * Advisory locks held by any session in the test database (0 after a refusal: nothing leaked),
 * or only those of one namespaced key.
 */
async function advisoryLocks(fullKey?: string): Promise<number> {
  const admin = await env.admin();
  const parts = fullKey === undefined ? null : lockParts(advisoryKey(fullKey));
  const r = await admin.query(
    `select count(*)::int as n from pg_locks where locktype = 'advisory' and granted
       and database = (select oid from pg_database where datname = current_database()) and pid <> pg_backend_pid()
       and ($1::int8 is null or (classid = $1::int8::oid and objid = $2::int8::oid and objsubid = 1))`,
    [parts?.classid ?? null, parts?.objid ?? null],
  );
  return Number(r.rows[0].n);
}

describe('PgBouncer, transaction pooling', () => {
  test('session locks are refused with an error that points to xactLock or a session-mode pool; nothing is left locked', async () => {
    for (const client of [await bouncerPool(), await bouncerSql()]) {
      const locks = createLocks(postgres(client), { prefix: `lh-${uid()}` });
      const before = await advisoryLocks();
      const err = await locks.tryAcquire('job').catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'LEASEHOLD_UNSUPPORTED' });
      expect((err as Error).message).toMatch(/PgBouncer/);
      expect((err as Error).message).toMatch(/xactLock/);
      expect((err as Error).message).toMatch(/pooler: 'session'/);
      // the refusal is remembered: no further round trips, the same answer
      await expect(locks.acquire('other', { wait: '1s' })).rejects.toMatchObject({ code: 'LEASEHOLD_UNSUPPORTED' });
      expect(await advisoryLocks()).toBeLessThanOrEqual(before);
      await locks.close();
    }
    // the same backend over a direct pool works
    const direct = createLocks(postgres(await env.pool()), { prefix: `lh-${uid()}` });
    const lease = await direct.acquire('job');
    expect(lease.held).toBe(true);
    await direct.close();
  });

  test('a busy pool (no second connection free) is refused at once all the same, never accepted unchecked', async () => {
    // the app's own work holds the pool's other connection while the session opens: a pooler
    // is refused without any check (none is needed), and the key stays free for others
    await migrate(await bouncerPool(1)); // records the fence epoch tryXactLock below needs (if not yet)
    const pool = await bouncerPool(2);
    const sql = postgresJs(BOUNCER_URL, { max: 2, prepare: false, connect_timeout: 3, onnotice: () => {} });
    closers.push(() => sql.end({ timeout: 2 }));
    for (const client of [pool, sql] as const) {
      const hog = client === pool ? await pool.connect() : await sql.reserve();
      const prefix = `lh-${uid()}`;
      const locks = createLocks(postgres(client), { prefix });
      const t0 = performance.now();
      const err = await locks.tryAcquire('job').catch((e: unknown) => e);
      expect(performance.now() - t0).toBeLessThan(1500); // no wait for a second connection
      expect(err).toMatchObject({ code: 'LEASEHOLD_UNSUPPORTED' });
      expect((err as Error).message).toMatch(/xactLock/);
      expect(await advisoryLocks(`${prefix}:job`)).toBe(0);
      // another client's xactLock through the pooler is the only holder
      const b = new pg.Client({ connectionString: BOUNCER_URL });
      await b.connect();
      try {
        await b.query('BEGIN');
        expect(await tryXactLock(b, 'job', { prefix })).not.toBeNull();
        await b.query('ROLLBACK');
      } finally {
        await b.end();
      }
      hog.release();
      await expect(locks.tryAcquire('job')).rejects.toMatchObject({ code: 'LEASEHOLD_UNSUPPORTED' });
      await locks.close();
    }
    // a direct connection needs no second one (its pid is the one announced at connect): a busy
    // pool of 2, directly and through a plain TCP proxy, still locks
    const relay = await new Relay().start();
    closers.push(() => relay.close());
    for (const url of [PG_URL, relay.url]) {
      const direct = new pg.Pool({ connectionString: url, max: 2 });
      direct.on('error', () => {});
      const dsql = postgresJs(url, { max: 2, connect_timeout: 3, onnotice: () => {} });
      closers.push(
        () => direct.end(),
        () => dsql.end({ timeout: 2 }),
      );
      for (const client of [direct, dsql] as const) {
        const hog = client === direct ? await direct.connect() : await dsql.reserve();
        const locks = createLocks(postgres(client), { prefix: `lh-${uid()}` });
        const lease = await locks.tryAcquire('job');
        expect(lease?.held).toBe(true);
        await lease!.release();
        hog.release();
        await locks.close();
      }
    }
  }, 60_000);

  test('xactLock, tryXactLock and checkFence work through it', async () => {
    const pool = await bouncerPool();
    await migrate(pool); // through it too: records the fence epoch xactLock needs (if not yet)
    const key = `k-${uid()}`;
    const a = await pool.connect();
    const b = await pool.connect();
    try {
      await a.query('BEGIN');
      const f1 = await xactLock(a, key);
      await b.query('BEGIN');
      expect(await tryXactLock(b, key)).toBeNull(); // held by a's transaction
      await checkFence(a, `r-${key}`, f1);
      await a.query('COMMIT');
      const f2 = await tryXactLock(b, key);
      expect(f2 !== null && f2 > f1).toBe(true);
      await checkFence(b, `r-${key}`, f2!);
      await b.query('COMMIT');
      await a.query('BEGIN');
      await expect(checkFence(a, `r-${key}`, f1)).rejects.toMatchObject({ code: 'LEASEHOLD_STALE_FENCE' });
      await a.query('ROLLBACK');
    } finally {
      a.release();
      b.release();
    }
  });

  test('xactLock through it excludes correctly under 8 concurrent processes', async () => {
    const admin = await env.admin();
    await admin.query('create table if not exists lh_bouncer_counter (k text primary key, n int not null)');
    const key = `c-${uid()}`;
    await admin.query('insert into lh_bouncer_counter values ($1, 0)', [key]);
    await migrate(await bouncerPool(1)); // fails clearly when PgBouncer is down; records the fence epoch
    const worker = fileURLToPath(new URL('./xact-worker.ts', import.meta.url));
    const rounds = 15;
    const outs = await Promise.all(
      Array.from({ length: 8 }, () =>
        run(process.execPath, ['--import', 'tsx', worker, BOUNCER_URL, key, String(rounds)], { timeout: 120_000 }),
      ),
    );
    const fences = outs.flatMap((o) => (JSON.parse(o.stdout.trim()) as { fences: string[] }).fences.map(BigInt));
    const { rows } = await admin.query('select n from lh_bouncer_counter where k = $1', [key]);
    expect(rows[0].n).toBe(8 * rounds); // no lost update
    expect(new Set(fences.map(String)).size).toBe(8 * rounds); // every grant its own fence
    await admin.query('delete from lh_bouncer_counter where k = $1', [key]);
    expect(PG_URL).not.toBe(BOUNCER_URL);
  }, 180_000);
});
