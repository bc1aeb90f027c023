/**
 * One process of the PgBouncer exclusion test: `rounds` read-modify-write transactions on one
 * counter row, each under xactLock (through the pooler) and checkFence. argv: url key rounds.
 * Prints one JSON line: { fences } (the fences it was granted, in order).
 */
import pg from 'pg';
import { checkFence, xactLock } from '../../src/backends/postgres/index.js';

const [url, key, rounds] = process.argv.slice(2) as [string, string, string];
const pool = new pg.Pool({ connectionString: url, max: 1 });
const fences: string[] = [];
for (let i = 0; i < Number(rounds); i++) {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    const fence = await xactLock(c, key);
    await checkFence(c, `counter:${key}`, fence);
    const { rows } = await c.query('SELECT n FROM lh_bouncer_counter WHERE k = $1', [key]);
    await new Promise((r) => setTimeout(r, 1)); // a read-yield-write race, were the lock broken
    await c.query('UPDATE lh_bouncer_counter SET n = $2 WHERE k = $1', [key, Number(rows[0].n) + 1]);
    await c.query('COMMIT');
    fences.push(String(fence));
  } catch (e) {
    await c.query('ROLLBACK').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
}
await pool.end();
process.stdout.write(JSON.stringify({ fences }) + '\n');
