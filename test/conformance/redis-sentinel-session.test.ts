/**
 * The conformance suite through Redis Sentinel (ioredis, as redis-sentinel.test.ts says why) in
 * session mode: renewed leases hang off a session key on the master. "Breaking" a renewed lock
 * ends its holder's session (DEL of the session key named in the lock); docs/redis.md, "Sessions".
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
    name: `redis sentinel session (${kind})`,
    ready: () => healed('sentinel'),
    make: async () => redis(await clients.make(kind), { session: true }),
    breakModes: ['delete'],
    breakLock: async (fullKey) => {
      const c = await adminClient();
      const v: string | null = await c.get(`{${fullKey}}`);
      const sep = v?.indexOf('|') ?? -1;
      if (v === null || sep < 0) throw new Error(`the lock ${fullKey} hangs off no session`);
      await c.del(v.slice(sep + 1));
    },
    countKeys: async (prefix) => ((await (await adminClient()).keys(`{${prefix}*`)) as string[]).length,
    cleanup: () => clients.closeAll(),
  });
}
