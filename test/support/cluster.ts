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

  /** `keyPrefix`: the client puts it on every key it sends (both clients have the option). */
  async make(kind: ClientKind, opts: { keyPrefix?: string } = {}): Promise<any> {
    if (kind === 'ioredis') {
      const c = new Cluster(CLUSTER_NODES, {
        lazyConnect: true,
        redisOptions: { maxRetriesPerRequest: 1, connectTimeout: 2000, ...opts },
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
      ...opts,
    } as never) as any;
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

/** The master `host:port` that serves `key`'s slot (or the slot itself), asked of the cluster itself. */
export async function ownerOf(admin: any, key: string | number): Promise<string> {
  const slot = typeof key === 'number' ? key : Number(await admin.cluster('KEYSLOT', key));
  const slots = (await admin.cluster('SLOTS')) as [number, number, [string, number]][];
  for (const [from, to, [host, port]] of slots) if (slot >= from && slot <= to) return `${host}:${port}`;
  throw new Error(`no owner for slot ${slot}`);
}

/**
 * Moves `slot` from the master that serves it to another master by hand, as `redis-cli --cluster
 * reshard` does (IMPORTING, MIGRATING, MIGRATE of its keys, SETSLOT NODE on every master), in
 * steps a test can stop between; and back. `admin` is an ioredis Cluster client; the slot goes to
 * the master at `toAddr` (host:port), or to the first other master.
 */
export async function slotMover(admin: any, slot: number, toAddr?: string) {
  const nodes = admin.nodes('master') as any[];
  const ids = new Map<any, string>();
  for (const n of nodes) ids.set(n, String(await n.cluster('MYID')));
  const addr = (n: any) => `${n.options.host}:${n.options.port}`;
  const owner = await ownerOf(admin, slot);
  const from = nodes.find((n) => addr(n) === owner);
  if (!from) throw new Error(`slot ${slot}: its owner ${owner} is not among the client's masters`);
  const to = nodes.find((n) => n !== from && (toAddr === undefined || addr(n) === toAddr));
  if (!to) throw new Error(`slot ${slot}: no master ${toAddr ?? 'other than its owner'} to move it to`);
  const migrate = async (src: any, dst: any) => {
    await dst.cluster('SETSLOT', slot, 'IMPORTING', ids.get(src));
    await src.cluster('SETSLOT', slot, 'MIGRATING', ids.get(dst));
    const keys: string[] = await src.cluster('GETKEYSINSLOT', slot, 1000);
    if (keys.length) await src.migrate(dst.options.host, dst.options.port, '', 0, 5000, 'KEYS', ...keys);
  };
  const every = admin.nodes('all') as any[];
  const ownerSeenBy = async (n: any): Promise<string | null> => {
    const ranges = (await n.cluster('SLOTS')) as [number, number, [string, number]][];
    const r = ranges.find(([a, b]) => a <= slot && slot <= b);
    return r ? `${r[2][0]}:${r[2][1]}` : null;
  };
  const settle = async (dst: any) => {
    const want = addr(dst);
    for (const n of nodes) await n.cluster('SETSLOT', slot, 'NODE', ids.get(dst));
    // until every node says dst serves the slot: a new owner that did not know the old owner's
    // higher config epoch yet keeps its own, and a late gossip message of the old owner then
    // takes the slot back on some nodes (MOVED both ways, for good). The new owner bumps its
    // epoch above all it knows of, and a node that still disagrees is told again.
    for (let i = 0; i < 100; i++) {
      await dst.cluster('BUMPEPOCH');
      const views = await Promise.all(every.map(ownerSeenBy));
      if (views.every((v) => v === want)) return;
      for (const [j, n] of every.entries()) {
        if (views[j] !== want && nodes.includes(n))
          await n.cluster('SETSLOT', slot, 'NODE', ids.get(dst)).catch(() => {});
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`slot ${slot}: the nodes did not agree that ${want} serves it`);
  };
  return {
    source: from,
    target: to,
    /** Only the slot states (MIGRATING / IMPORTING): no key moves. */
    half: async () => {
      await to.cluster('SETSLOT', slot, 'IMPORTING', ids.get(from));
      await from.cluster('SETSLOT', slot, 'MIGRATING', ids.get(to));
    },
    start: () => migrate(from, to),
    finish: () => settle(to),
    back: async () => {
      await migrate(to, from).catch(() => {});
      await settle(from);
      for (const n of nodes) await n.cluster('SETSLOT', slot, 'STABLE');
    },
  };
}
