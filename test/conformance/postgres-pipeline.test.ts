/**
 * The pg driver in pipeline mode (`new pg.Pool({ pipeline: true })`, pg 8.23+): statements go out
 * without waiting for the previous answer, and the driver takes pg's config-object path for them
 * (src/backends/postgres/pg.ts). The same suite as a plain pg Pool; the first test shows that the
 * installed pg honours the option (an older one ignores it, and the suite would test nothing new).
 */
import pg from 'pg';
import { expect, test } from 'vitest';
import { Pg, PG_URL } from '../postgres/support.js';
import { conformance } from './suite.js';

const env = new Pg();

test('a pg Pool made as below runs its clients in pipeline mode', async () => {
  const pool = new pg.Pool({ connectionString: PG_URL, max: 1, pipeline: true });
  const client = await pool.connect();
  try {
    expect(client.pipeline).toBe(true);
    // two statements in flight on one connection: each gets its own answer, in order
    const [a, b] = await Promise.all([client.query('SELECT pg_backend_pid() AS p'), client.query('SELECT 2 AS v')]);
    expect(typeof a.rows[0].p).toBe('number');
    expect(b.rows[0].v).toBe(2);
  } finally {
    client.release();
    await pool.end();
  }
});

conformance({
  name: 'postgres (pg Pool, pipeline mode)',
  make: () => env.backend('pg', undefined, { pipeline: true }),
  breakLock: (fullKey, how) => env.breakLock(fullKey, how),
  countKeys: (prefix) => env.countKeys(prefix),
  cleanup: () => env.closeAll(),
});
