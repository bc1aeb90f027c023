/** The conformance suite (with the recipes) on a real Redis Cluster, with both clients' cluster clients. */
import { redis } from '../../src/backends/redis/index.js';
import { ClusterClients } from '../support/cluster.js';
import { healed } from '../support/failover.js';
import type { ClientKind } from '../support/redis.js';
import { conformance } from './suite.js';

for (const kind of ['ioredis', 'node-redis'] as ClientKind[]) {
  const clients = new ClusterClients();
  let admin: any;
  const adminClient = async () => (admin ??= await clients.make('ioredis'));

  conformance({
    name: `redis cluster (${kind})`,
    ready: () => healed('cluster'),
    make: async () => redis(await clients.make(kind)),
    breakLock: async (fullKey, how) => {
      const c = await adminClient();
      if (how === 'delete') await c.del(`{${fullKey}}`);
      else await c.set(`{${fullKey}}`, 'someone-else', 'PX', 60_000);
    },
    countKeys: async (prefix) => {
      const c = await adminClient();
      let n = 0;
      for (const node of c.nodes('master')) n += ((await node.keys(`{${prefix}*`)) as string[]).length;
      return n;
    },
    cleanup: () => clients.closeAll(),
  });
}
