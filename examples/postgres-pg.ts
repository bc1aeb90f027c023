/**
 * leasehold on PostgreSQL advisory locks through `pg`: the walk-through in tour.ts (session mode:
 * each held lock keeps one pooled connection), then a transaction-level lock with `xactLock`.
 *   npx tsx examples/postgres-pg.ts            # DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test
 */
import pg from 'pg';
import { createLocks } from 'leasehold';
import { postgres, xactLock } from 'leasehold/postgres';
import { tour } from './tour.js';

const prefix = process.env.LEASEHOLD_PREFIX ?? 'examples';
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' });
const locks = createLocks(postgres(pool), { ttl: '10s', prefix });

await tour(locks);

// transaction mode: the lock belongs to the transaction and ends with COMMIT / ROLLBACK
const client = await pool.connect();
try {
  await client.query('BEGIN');
  const fence = await xactLock(client, 'order:42', { prefix }); // same keys and fences as postgres()
  console.log(`xactLock: "order:42" held by this transaction, fence ${fence}`);
  await client.query('COMMIT');
} catch (e) {
  await client.query('ROLLBACK');
  throw e;
} finally {
  client.release();
}

await locks.close(); // releases what it still holds; never ends your pool
await pool.end();
console.log('ok: postgres (pg)');
