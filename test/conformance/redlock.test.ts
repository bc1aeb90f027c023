/** The conformance suite against Redlock on 3 nodes (7001-7003, ioredis) and 5 nodes (7001-7005, node-redis). */
import { redlock } from '../../src/backends/redlock/index.js';
import { Clients, type ClientKind } from '../support/redis.js';
import { conformance } from './suite.js';

const PORTS = [7001, 7002, 7003, 7004, 7005];
const url = (port: number) => `redis://127.0.0.1:${port}`;

// each client once and each node count once (the whole matrix took 65 s of CI; the clients'
// adapters are also covered on every node count by test/redlock/basic.test.ts)
const VARIANTS: [number, ClientKind][] = [
  [3, 'ioredis'],
  [5, 'node-redis'],
];
for (const [count, kind] of VARIANTS) {
  const ports = PORTS.slice(0, count);
  const clients = new Clients();
  let admins: any[] | undefined;
  const adminClients = async () => (admins ??= await Promise.all(ports.map((p) => clients.make('ioredis', url(p)))));

  conformance({
    name: `redlock (${count} nodes, ${kind})`,
    make: async () => redlock(await Promise.all(ports.map((p) => clients.make(kind, url(p))))),
    // An outsider breaks the lock on every node.
    breakLock: async (fullKey, how) => {
      for (const c of await adminClients()) {
        if (how === 'delete') await c.del(`{${fullKey}}`);
        else await c.set(`{${fullKey}}`, 'someone-else', 'PX', 60_000);
      }
    },
    countKeys: async (prefix) => {
      let n = 0;
      for (const c of await adminClients()) n += ((await c.keys(`{${prefix}*`)) as string[]).length;
      return n;
    },
    cleanup: () => clients.closeAll(),
  });
}
