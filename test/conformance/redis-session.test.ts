/**
 * Redis in session mode (`redis(client, { session: true })`), both clients: renewed leases hang
 * off a session key per TTL. "Breaking" a renewed lock ends its holder's session (DEL of the
 * session key named in the lock), which the holder hears at its next renewal; a lock deleted or
 * overwritten by itself is only noticed at its rare refresh (docs/redis.md, "Sessions").
 */
import { redis } from '../../src/backends/redis/index.js';
import { Clients, type ClientKind } from '../support/redis.js';
import { conformance } from './suite.js';

for (const kind of ['ioredis', 'node-redis'] as ClientKind[]) {
  const clients = new Clients();
  let admin: any;
  const adminClient = async () => (admin ??= await clients.make('ioredis'));

  conformance({
    name: `redis session (${kind})`,
    make: async () => redis(await clients.make(kind), { session: true }),
    breakModes: ['delete'],
    breakLock: async (fullKey) => {
      const c = await adminClient();
      const v: string | null = await c.get(`{${fullKey}}`);
      const sep = v?.indexOf('|') ?? -1;
      if (v === null || sep < 0)
        throw new Error(`the lock ${fullKey} hangs off no session: ${v === null ? 'none' : 'own PX'}`);
      await c.del(v.slice(sep + 1));
    },
    countKeys: async (prefix) => {
      const c = await adminClient();
      const keys: string[] = await c.keys(`{${prefix}*`);
      return keys.length;
    },
    cleanup: () => clients.closeAll(),
  });
}
