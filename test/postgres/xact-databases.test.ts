/**
 * Transaction mode remembers, per database, that its tables exist (to skip the check on every
 * call): a client of another database, with the same schema name, must still get them created on
 * its first use there, not a failed transaction.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import postgresJs from 'postgres';
import { afterAll, describe, expect, test } from 'vitest';
import { checkFence } from '../../src/backends/postgres/index.js';
import { KINDS, PG_URL, Pg } from './support.js';

const env = new Pg();
const extra: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  await Promise.all(extra.map((end) => end()));
  await env.closeAll();
});

const uid = () => randomUUID().slice(0, 8);

/** The same server, database `postgres` (the tests' own is `test`). */
const OTHER_URL = (() => {
  const u = new URL(PG_URL);
  u.pathname = '/postgres';
  return u.toString();
})();

describe.each(KINDS)('%s', (kind) => {
  test('checkFence in a second database, same schema name, after the first: the tables are created there too', async () => {
    const schema = `lh_db_${uid()}`;
    const first = await env.client(kind);
    let second: any;
    if (kind === 'pg') {
      second = new pg.Pool({ connectionString: OTHER_URL, max: 2 });
      second.on('error', () => {});
      extra.push(() => second.end());
    } else {
      second = postgresJs(OTHER_URL, { max: 2, onnotice: () => {} });
      extra.push(() => second.end({ timeout: 2 }));
    }
    const inTx = async (client: any, fn: (tx: any) => Promise<void>) => {
      if (kind === 'postgres.js') return client.begin(fn);
      const c = await client.connect();
      try {
        await c.query('BEGIN');
        await fn(c);
        await c.query('COMMIT');
      } catch (e) {
        await c.query('ROLLBACK');
        throw e;
      } finally {
        c.release();
      }
    };
    const other = new pg.Client({ connectionString: OTHER_URL });
    await other.connect();
    try {
      // created on the first use, seen on the second (and remembered)
      await inTx(first, (tx) => checkFence(tx, 'res', 5n, { schema }));
      await inTx(first, (tx) => checkFence(tx, 'res', 6n, { schema }));
      // the other database has no such schema yet: created in this transaction, as on first use
      // (it failed with 42P01, the caller's transaction aborted, where the first database was known)
      await inTx(second, (tx) => checkFence(tx, 'res', 7n, { schema }));
      await inTx(second, (tx) => checkFence(tx, 'res', 8n, { schema }));
      const seen = await other.query(`select fence::text as f from "${schema}".leasehold_fence_seen`);
      expect(seen.rows).toEqual([{ f: '8' }]);
    } finally {
      await (await env.admin()).query(`drop schema if exists "${schema}" cascade`);
      await other.query(`drop schema if exists "${schema}" cascade`);
      await other.end();
    }
  });
});
