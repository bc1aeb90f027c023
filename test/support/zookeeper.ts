/** Real ZooKeeper servers for tests. A missing server fails the test run; it is never skipped. */
import zk from 'node-zookeeper-client';
import {
  connectZookeeper,
  type ZookeeperBackend,
  type ZookeeperConnectOptions,
} from '../../src/backends/zookeeper/index.js';
import { encodeKey, lockNodesOf } from './zookeeper-paths.js';

export const ZK_HOSTS = process.env.LEASEHOLD_ZK_HOSTS ?? '127.0.0.1:2181';
export const ZK_ENSEMBLE = process.env.LEASEHOLD_ZK_ENSEMBLE ?? '127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193';

/** A raw client (an outsider's), connected. */
export async function rawClient(hosts = ZK_HOSTS, sessionTimeout = 4000): Promise<any> {
  const c = zk.createClient(hosts, { sessionTimeout, spinDelay: 100, retries: 0 });
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(
      () => reject(new Error(`ZooKeeper at ${hosts} is not reachable (run scripts/services.sh)`)),
      5000,
    );
    c.once('connected', () => (clearTimeout(t), resolve()));
    c.connect();
  }).catch((e: unknown) => {
    c.close();
    throw e;
  });
  return c;
}

export const call = <T>(fn: (cb: (e: unknown, r?: T) => void) => void): Promise<T> =>
  new Promise((resolve, reject) => fn((e, r) => (e ? reject(e) : resolve(r as T))));

/** Opens backends and clients and remembers them so one call closes them all. */
export class Zk {
  private readonly open: Array<() => Promise<unknown>> = [];
  private admin: any = null;

  constructor(readonly hosts = ZK_HOSTS) {}

  async backend(options: ZookeeperConnectOptions = {}): Promise<ZookeeperBackend> {
    const b = await connectZookeeper(this.hosts, { sessionTimeout: 30_000, connectTimeout: 5000, ...options }).catch(
      (e: Error) => {
        throw new Error(`ZooKeeper at ${this.hosts} is not reachable (run scripts/services.sh): ${e.message}`);
      },
    );
    this.open.push(() => b.close());
    return b;
  }

  async client(): Promise<any> {
    const c = await rawClient(this.hosts);
    this.open.push(async () => c.close());
    return c;
  }

  async outsider(): Promise<any> {
    this.admin ??= await this.client();
    return this.admin;
  }

  /** The children of a lock's directory (lock nodes only, lowest first); [] when it has none. */
  async lockNodes(fullKey: string, root = '/leasehold'): Promise<string[]> {
    const c = await this.outsider();
    const children = await call<string[]>((cb) => c.getChildren(`${root}/locks/${encodeKey(fullKey)}`, cb)).catch(
      (e: { code?: number }) => {
        if (e.code === -101) return [] as string[];
        throw e;
      },
    );
    return lockNodesOf(children);
  }

  /** Deletes the holder's node (an outsider breaking the lock). */
  async breakLock(fullKey: string, root = '/leasehold'): Promise<void> {
    const [head] = await this.lockNodes(fullKey, root);
    if (!head) throw new Error(`no lock node for ${fullKey}`);
    const c = await this.outsider();
    await call((cb) => c.remove(`${root}/locks/${encodeKey(fullKey)}/${head}`, -1, cb));
  }

  /** Lock directories and results stored under a full-key prefix. */
  async countKeys(prefix: string, root = '/leasehold'): Promise<number> {
    const c = await this.outsider();
    let n = 0;
    for (const where of ['locks', 'results']) {
      const names = await call<string[]>((cb) => c.getChildren(`${root}/${where}`, cb)).catch(() => [] as string[]);
      n += names.filter((x) => x.startsWith(encodeKey(prefix))).length;
    }
    return n;
  }

  async closeAll(): Promise<void> {
    this.admin = null;
    await Promise.allSettled(this.open.splice(0).map((f) => f()));
  }
}

/** The connection state of the backend's own node-zookeeper-client (-2: CLOSED). */
export const clientState = (b: ZookeeperBackend): number =>
  (b as unknown as { zk: { client: { connectionManager: { state: number } } } }).zk.client.connectionManager.state;
