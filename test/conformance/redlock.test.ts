/** The conformance suite against Redlock on 3 nodes (7001-7003) and 5 nodes (7001-7005). */
import { redlock } from '../../src/backends/redlock/index.js';
import { Clients, type ClientKind } from '../support/redis.js';
import { conformance } from './suite.js';

const PORTS = [7001, 7002, 7003, 7004, 7005];
const url = (port: number) => `redis://127.0.0.1:${port}`;

for (const count of [3, 5]) {
  for (const kind of ['ioredis', 'node-redis'] as ClientKind[]) {
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
}
