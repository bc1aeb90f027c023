/**
 * Real Redis Cluster clients for tests (scripts/services.d/cluster.sh: 3 masters + 3 replicas on
 * 127.0.0.1:7301..7306). A missing cluster fails the test run; it is never skipped.
 */
import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import type { ClientKind } from './redis.js';

/** The Cluster's seed nodes (LEASEHOLD_CLUSTER_NODES, read at each call). */
export const clusterNodes = (): { host: string; port: number }[] =>
  (process.env.LEASEHOLD_CLUSTER_NODES ?? '127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303').split(',').map((hp) => {
    const [host, port] = hp.split(':');
    return { host: host!, port: Number(port) };
  });

export const CLUSTER_NODES = clusterNodes();

const unreachable = (e: Error) =>
  new Error(
    `Redis Cluster at ${CLUSTER_NODES.map((n) => `${n.host}:${n.port}`).join(',')} is not reachable (run scripts/services.sh cluster): ${e.message}`,
  );

/** Opens cluster clients and remembers them so one call closes them all. */
export class ClusterClients {
  private readonly open: Array<() => Promise<unknown>> = [];

  async make(kind: ClientKind): Promise<any> {
    if (kind === 'ioredis') {
      const c = new Cluster(CLUSTER_NODES, {
        lazyConnect: true,
        redisOptions: { maxRetriesPerRequest: 1, connectTimeout: 2000 },
        clusterRetryStrategy: (times) => (times > 20 ? null : 200),
      });
      c.on('error', () => {});
      await c.connect().catch((e: Error) => {
        throw unreachable(e);
      });
      this.open.push(() => c.quit().catch(() => c.disconnect()));
      return c;
    }
    const c = createCluster({
      rootNodes: CLUSTER_NODES.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
      defaults: { socket: { connectTimeout: 2000 } },
    });
    c.on('error', () => {});
    await c.connect().catch((e: Error) => {
      throw unreachable(e);
    });
    this.open.push(() => c.close().catch(() => c.destroy()));
    return c;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.open.splice(0).map((f) => f()));
  }
}

/** The master `host:port` that serves `key`'s slot, asked of the cluster itself. */
export async function ownerOf(admin: any, key: string): Promise<string> {
  const slot = Number(await admin.cluster('KEYSLOT', key));
  const slots = (await admin.cluster('SLOTS')) as [number, number, [string, number]][];
  for (const [from, to, [host, port]] of slots) if (slot >= from && slot <= to) return `${host}:${port}`;
  throw new Error(`no owner for slot ${slot}`);
}
