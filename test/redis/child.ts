/**
 * A process of the Redis liveness tests.
 *   queue <url> <prefix> <key> <ttlMs>   queues for the key (acquire, wait 1h); prints
 *                                        {kind:'waiting'} first and {kind:'held'} if granted
 * The parent SIGKILLs it while it waits.
 */
import { Redis } from 'ioredis';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks } from '../../src/index.js';

const say = (m: object) =>
  process.stdout.write(JSON.stringify(m, (_, v) => (typeof v === 'bigint' ? String(v) : v)) + '\n');

const [role, url, prefix, key, ttl] = process.argv.slice(2);
const client = new Redis(url!, { maxRetriesPerRequest: 1 });
const locks = createLocks(redis(client), { prefix: prefix!, ttl: Number(ttl), wait: '1h' });

if (role === 'queue') {
  say({ kind: 'waiting' });
  const lease = await locks.acquire(key!);
  say({ kind: 'held', fence: lease.fence });
}
await locks.close();
client.disconnect();
say({ kind: 'done' });
