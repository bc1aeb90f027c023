/**
 * leasehold on Redlock: a lock needs a majority of independent Redis masters, so it survives the
 * loss of a minority. The walk-through in tour.ts, on three nodes.
 *   npx tsx examples/redlock.ts                # REDLOCK_URLS, default redis://127.0.0.1:7001,…7002,…7003
 *   bash scripts/services.sh                   # starts the nodes 7001–7005 locally
 */
import { Redis } from 'ioredis';
import { createLocks } from 'leasehold';
import { redlock } from 'leasehold/redlock';
import { tour } from './tour.js';

const urls = (process.env.REDLOCK_URLS ?? 'redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003').split(
  ',',
);
const clients = urls.map((url) => new Redis(url)); // ioredis or node-redis clients, one per independent master
const locks = createLocks(redlock(clients), { ttl: '10s', prefix: process.env.LEASEHOLD_PREFIX ?? 'examples' });

await tour(locks);
await locks.close();
await Promise.all(clients.map((c) => c.quit()));
console.log(`ok: redlock (${clients.length} nodes)`);
