/**
 * leasehold on one Redis server through node-redis (`redis` ≥ 4): the walk-through in tour.ts.
 * node-redis connects explicitly: `await client.connect()` before use.
 *   npx tsx examples/redis-node-redis.ts       # REDIS_URL, default redis://127.0.0.1:6379
 */
import { createClient } from 'redis';
import { createLocks } from 'leasehold';
import { redis } from 'leasehold/redis';
import { tour } from './tour.js';

const client = createClient({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' });
client.on('error', (e: Error) => console.error('redis:', e.message)); // node-redis needs an error listener
await client.connect();
const locks = createLocks(redis(client), { ttl: '10s', prefix: process.env.LEASEHOLD_PREFIX ?? 'examples' });

await tour(locks);
await locks.close(); // releases what it still holds; never closes your client
await client.close(); // node-redis 4: client.quit()
console.log('ok: redis (node-redis)');
