/**
 * The conformance suite (with the recipes) through Redis Sentinel, with ioredis' Sentinel support.
 * node-redis' createSentinel is not run here: each of its clients (and each duplicate, which the
 * backend's subscriber is) builds its command tables on creation, 0.6-1.6 s of event-loop time
 * on this shared machine, which stalls every renewal in the process (a 300 ms lease is lost) and
 * the first push wake-up. docs/redis.md says so; the failover tests use both clients.
 */
import { redis } from '../../src/backends/redis/index.js';
import type { ClientKind } from '../support/redis.js';
import { healed } from '../support/failover.js';
import { SentinelClients } from '../support/sentinel.js';
import { conformance } from './suite.js';

for (const kind of ['ioredis'] as ClientKind[]) {
  const clients = new SentinelClients();
  let admin: any;
  const adminClient = async () => (admin ??= await clients.make('ioredis'));

  conformance({
    name: `redis sentinel (${kind})`,
    ready: () => healed('sentinel'),
    make: async () => redis(await clients.make(kind)),
    breakLock: async (fullKey, how) => {
      const c = await adminClient();
      if (how === 'delete') await c.del(`{${fullKey}}`);
      else await c.set(`{${fullKey}}`, 'someone-else', 'PX', 60_000);
    },
    countKeys: async (prefix) => ((await (await adminClient()).keys(`{${prefix}*`)) as string[]).length,
    cleanup: () => clients.closeAll(),
  });
}
