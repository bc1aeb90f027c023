/**
 * leasehold on one Redis server through ioredis: the walk-through in tour.ts.
 *   npx tsx examples/redis-ioredis.ts          # REDIS_URL, default redis://127.0.0.1:6379
 */
import { Redis } from 'ioredis';
import { createLocks } from 'leasehold';
import { redis } from 'leasehold/redis';
import { tour } from './tour.js';

const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const locks = createLocks(redis(client), { ttl: '10s', prefix: process.env.LEASEHOLD_PREFIX ?? 'examples' });

await tour(locks);
await locks.close(); // releases what it still holds; never closes your client
await client.quit();
console.log('ok: redis (ioredis)');
