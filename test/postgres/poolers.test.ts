/**
 * Session locks behind poolers, on a private PgBouncer (bouncer.ts): through a transaction pooler
 * that hands out its server connections round robin they are refused (fail closed: a pooler is
 * only trusted when declared session-mode); with `pooler: 'session'` through a session-mode pool
 * they work; a session that moves to another server connection loses its leases at once; a bad
 * `pooler` value is refused before any I/O.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import postgresJs from 'postgres';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { InvalidArgumentError, createLocks, type Lease } from '../../src/index.js';
import { TransactionPoolerError, migrate, postgres, tryXactLock } from '../../src/backends/postgres/index.js';
import { startBouncer, type PrivateBouncer } from './bouncer.js';
import { PG_URL } from './support.js';

let bouncer: PrivateBouncer;
const closers: Array<() => Promise<unknown>> = [];
beforeAll(async () => {
  bouncer = await startBouncer();
  const direct = new pg.Pool({ connectionString: PG_URL, max: 2 });
  await migrate(direct); // the fence epoch tryXactLock needs (if not yet recorded)
  await direct.end();
}, 30_000);
afterAll(async () => {
  // the bouncer first: a pool whose connection a failed test left checked out would wait forever
  // in end(); with the bouncer gone its connections end
  await bouncer?.stop();
  await Promise.allSettled(closers.map((f) => f()));
});

const uid = () => randomUUID().slice(0, 8);

function pgPool(url: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 3000 });
  pool.on('error', () => {});
  closers.push(() => pool.end());
  return pool;
}

function jsSql(url: string, prepare: boolean): postgresJs.Sql {
  const sql = postgresJs(url, { max: 4, prepare, connect_timeout: 3, onnotice: () => {} });
  closers.push(() => sql.end({ timeout: 2 }));
  return sql;
}

/** Another client's transaction-scoped try on the key, through `url`: its fence, or null. */
async function otherTries(url: string, key: string, prefix: string): Promise<bigint | null> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query('BEGIN');
    const f = await tryXactLock(c, key, { prefix });
    await c.query('ROLLBACK');
    return f;
  } finally {
    await c.end();
  }
}

describe('a transaction pooler with round robin (server_round_robin = 1)', () => {
  test('session locks are refused, each time, with what to do; the key stays free for others', async () => {
    for (let round = 0; round < 4; round++) {
      for (const client of [pgPool(bouncer.transactionUrl), jsSql(bouncer.transactionUrl, false)]) {
        // a busy pooler: both server connections in use at once
        const q = (t: string) => (client instanceof pg.Pool ? client.query(t) : client.unsafe(t));
        await Promise.all([q('select pg_sleep(0.05)'), q('select pg_sleep(0.05)')]);
        const prefix = `lh-${uid()}`;
        const locks = createLocks(postgres(client), { prefix, ttl: '30s' });
        const err = await locks.tryAcquire('k').catch((e: unknown) => e);
        if (!(err instanceof Error)) {
          // the old check let it through: show the second holder it allowed
          const other = await otherTries(bouncer.transactionUrl, 'k', prefix);
          await locks.close();
          expect.fail(`session lock granted through a transaction pooler (another client's tryXactLock: ${other})`);
        }
        expect(err).toBeInstanceOf(TransactionPoolerError);
        expect(err).toMatchObject({ code: 'LEASEHOLD_UNSUPPORTED' });
        expect(err.message).toMatch(/xactLock/);
        expect(err.message).toMatch(/pooler: 'session'/);
        expect(err.message).toMatch(/directly/);
        expect(await otherTries(bouncer.transactionUrl, 'k', prefix)).not.toBeNull();
        await locks.close();
      }
    }
  }, 60_000);

  test("declared session-mode but not: a lease whose session moves to another server connection is lost at once, as a pooler's", async () => {
    // the declaration is the user's promise; the sanity check may pass (round robin), then the
    // next statement runs on the other server connection: the liveness probe sees another pid
    let lease: Lease | null = null;
    let locks: ReturnType<typeof createLocks> | null = null;
    for (let i = 0; i < 100 && !lease; i++) {
      const pool = new pg.Pool({ connectionString: bouncer.transactionUrl, max: 4, connectionTimeoutMillis: 3000 });
      pool.on('error', () => {});
      locks = createLocks(postgres(pool, { pooler: 'session' }), { prefix: `lh-${uid()}`, ttl: '30s' });
      const got = await locks.tryAcquire('k').catch((e: unknown) => e);
      if (got instanceof Error) {
        expect(got).toBeInstanceOf(TransactionPoolerError); // the sanity check caught it
        await locks.close();
        await pool.end();
      } else {
        lease = got as Lease | null;
        closers.push(() => pool.end());
      }
    }
    expect(lease, 'no attempt passed the sanity check (it cannot test the liveness probe)').not.toBeNull();
    // round robin sends the next statement to the other server connection; should it land on
    // the same one, the lease is confirmed there and the next probe tries again
    for (let i = 0; i < 10 && lease!.held; i++) await lease!.extend().catch(() => {});
    expect(lease!.held).toBe(false);
    expect(lease!.signal.reason).toMatchObject({ code: 'LEASEHOLD_LEASE_LOST' });
    expect((lease!.signal.reason as Error).cause).toBeInstanceOf(TransactionPoolerError);
    // refused from then on
    await expect(locks!.tryAcquire('other')).rejects.toBeInstanceOf(TransactionPoolerError);
    await locks!.close();
  }, 60_000);
});

describe("a session-mode pool declared with pooler: 'session'", () => {
  test('session locks work, exclude others (sessions and transactions), and fence upwards', async () => {
    for (const [name, make] of [
      ['pg', () => pgPool(bouncer.sessionUrl)],
      ['postgres.js', () => jsSql(bouncer.sessionUrl, true)],
    ] as const) {
      const prefix = `lh-${uid()}`;
      const a = createLocks(postgres(make(), { pooler: 'session' }), { prefix });
      const b = createLocks(postgres(make(), { pooler: 'session' }), { prefix });
      const lease = await a.tryAcquire('job');
      expect(lease?.held, name).toBe(true);
      expect(await b.tryAcquire('job')).toBeNull();
      expect(await otherTries(bouncer.sessionUrl, 'job', prefix)).toBeNull();
      expect(await otherTries(PG_URL, 'job', prefix)).toBeNull();
      await lease!.extend();
      expect(lease!.held).toBe(true);
      await lease!.release();
      const next = await b.acquire('job', { wait: '5s' });
      expect(next.fence > lease!.fence).toBe(true);
      await next.release();
      await a.close();
      await b.close();
    }
  }, 60_000);

  test('undeclared, the same session-mode pool is refused (a pooler is never trusted unsaid)', async () => {
    const locks = createLocks(postgres(pgPool(bouncer.sessionUrl)), { prefix: `lh-${uid()}` });
    await expect(locks.tryAcquire('job')).rejects.toMatchObject({ code: 'LEASEHOLD_UNSUPPORTED' });
    await locks.close();
  });
});

test('a bad pooler value is refused before any I/O', async () => {
  const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', max: 4 });
  pool.on('error', () => {});
  for (const bad of ['transaction', 'Session', 'statement', true, 1, null, {}]) {
    expect(() => postgres(pool, { pooler: bad as never }), String(bad)).toThrow(InvalidArgumentError);
    expect(() => postgres(pool, { pooler: bad as never })).toThrow(/pooler must be 'session'/);
  }
  expect(pool.totalCount).toBe(0);
  // the same postgres() with pooler: 'session' or none is built (and connects only when used)
  postgres(pool, { pooler: 'session' });
  postgres(pool, { pooler: undefined });
  expect(pool.totalCount).toBe(0);
  await pool.end();
});
