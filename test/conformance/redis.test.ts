import { redis } from '../../src/backends/redis/index.js';
import { Clients, type ClientKind } from '../support/redis.js';
import { conformance } from './suite.js';

for (const kind of ['ioredis', 'node-redis'] as ClientKind[]) {
  const clients = new Clients();
  let admin: any;
  const adminClient = async () => (admin ??= await clients.make('ioredis'));

  conformance({
    name: `redis (${kind})`,
    make: async () => redis(await clients.make(kind)),
    breakLock: async (fullKey, how) => {
      const c = await adminClient();
      if (how === 'delete') await c.del(`{${fullKey}}`);
      else await c.set(`{${fullKey}}`, 'someone-else', 'PX', 60_000);
    },
    countKeys: async (prefix) => {
      const c = await adminClient();
      const keys: string[] = await c.keys(`{${prefix}*`);
      return keys.length;
    },
    cleanup: () => clients.closeAll(),
  });
}
