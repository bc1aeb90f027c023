/**
 * leasehold on PostgreSQL advisory locks through postgres.js (`postgres`): the walk-through in
 * tour.ts, then a transaction-level lock with `xactLock` inside `sql.begin`.
 *   npx tsx examples/postgres-postgresjs.ts    # DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test
 */
import postgresJs from 'postgres';
import { createLocks } from 'leasehold';
import { postgres, xactLock } from 'leasehold/postgres';
import { tour } from './tour.js';

const prefix = process.env.LEASEHOLD_PREFIX ?? 'examples';
const sql = postgresJs(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', { onnotice: () => {} });
const locks = createLocks(postgres(sql), { ttl: '10s', prefix });

await tour(locks);

// transaction mode: the lock belongs to the transaction and ends with it
await sql.begin(async (tx) => {
  const fence = await xactLock(tx, 'order:42', { prefix }); // same keys and fences as postgres()
  console.log(`xactLock: "order:42" held by this transaction, fence ${fence}`);
});

await locks.close(); // releases what it still holds; never ends your sql
await sql.end();
console.log('ok: postgres (postgres.js)');
