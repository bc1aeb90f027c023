/**
 * `leasehold/zookeeper`: locks on a ZooKeeper ensemble through node-zookeeper-client (an
 * optional peer dependency): Curator's InterProcessMutex recipe, czxid fences, predecessor-only
 * watches, the session as liveness. See docs/zookeeper.md.
 */
import { toMs, type Duration } from '../../duration.js';
import { BackendError, InvalidArgumentError } from '../../errors.js';
import { checkOptions } from '../../validate.js';
import { isZookeeperClient, ZkSession, type ZookeeperClientLike } from './client.js';
import { isZkPath, parseHosts } from './hosts.js';
import { ZookeeperBackend } from './backend.js';

export { ZookeeperBackend } from './backend.js';
export { type ZookeeperClientLike } from './client.js';
export { zkChannel, type SessionState, type ZookeeperEvent } from './events.js';
export { encodeKey, decodeKey, digestOf } from './paths.js';

export interface ZookeeperOptions {
  /** The tree leasehold uses (default `'/leasehold'`; a chroot in the client's string also applies). */
  root?: string;
  /**
   * Treat SUSPENDED (the connection dropped; the session may still live) as lost: every lease
   * of the session is signalled at once rather than when the session is LOST (default false).
   */
  suspendedIsLost?: boolean;
}

const OPTIONS = ['root', 'suspendedIsLost'] as const;

/** Options of a client leasehold makes itself (fromUrl, `connectZookeeper`). */
export interface ZookeeperConnectOptions extends ZookeeperOptions {
  /**
   * Requested session timeout (default `'30s'`, the default ttl; the server bounds it). A lease's
   * ttl may not exceed the negotiated timeout.
   */
  sessionTimeout?: Duration;
  /** How long the first connection may take (default `'10s'`). */
  connectTimeout?: Duration;
  /**
   * Resolve at once and connect in the background (default false: resolve once connected, or
   * reject after `connectTimeout`). Calls made meanwhile wait for the connection, bounded as usual.
   */
  lazyConnect?: boolean;
}

export function checkRoot(root: unknown): string {
  if (root === undefined) return '/leasehold';
  if (typeof root !== 'string' || !isZkPath(root)) {
    throw new InvalidArgumentError(`zookeeper: root must be an absolute path like '/leasehold', got ${String(root)}`);
  }
  return root;
}

function parse(options: unknown, allowed: readonly string[], where: string) {
  const o = checkOptions<ZookeeperConnectOptions>(options, allowed, where);
  const root = checkRoot(o.root);
  if (o.suspendedIsLost !== undefined && typeof o.suspendedIsLost !== 'boolean')
    throw new InvalidArgumentError(`${where}: suspendedIsLost must be a boolean`);
  return { o, root, suspendedIsLost: o.suspendedIsLost ?? false };
}

/**
 * A backend on the caller's node-zookeeper-client `Client` (connected or connecting; never
 * closed by leasehold). After the server expires its session that client is dead: make a new
 * client and backend (fromUrl's own client replaces itself).
 */
export function zookeeper(client: ZookeeperClientLike, options?: ZookeeperOptions): ZookeeperBackend {
  if (!isZookeeperClient(client))
    throw new InvalidArgumentError('zookeeper(client): client must be a node-zookeeper-client Client');
  const { root, suspendedIsLost } = parse(options, OPTIONS, 'zookeeper');
  const session = new ZkSession(client, null, 30_000);
  return new ZookeeperBackend({ session, owned: false, root, suspendedIsLost });
}

/**
 * Connects to `hosts` (`'h:p,h:p[/chroot]'`) with a client of leasehold's own (closed by the
 * backend's `close()`; a new session replaces an expired one). Used by `fromUrl('zk://…')`.
 */
export async function connectZookeeper(hosts: string, options?: ZookeeperConnectOptions): Promise<ZookeeperBackend> {
  if (typeof hosts !== 'string')
    throw new InvalidArgumentError('connectZookeeper: hosts must look like "host:port[,host:port…][/chroot]"');
  // ports (1 to 65535) and the chroot are checked here: node-zookeeper-client throws for a bad
  // port from a timer (the process ends) and for a bad chroot from an assert
  const { servers, chroot } = parseHosts(hosts, 'connectZookeeper');
  const {
    o,
    root: under,
    suspendedIsLost,
  } = parse(options, [...OPTIONS, 'sessionTimeout', 'connectTimeout', 'lazyConnect'], 'connectZookeeper');
  const sessionTimeout = o.sessionTimeout === undefined ? 30_000 : toMs(o.sessionTimeout, 'sessionTimeout');
  const connectMs = o.connectTimeout === undefined ? 10_000 : toMs(o.connectTimeout, 'connectTimeout');
  if (o.lazyConnect !== undefined && typeof o.lazyConnect !== 'boolean')
    throw new InvalidArgumentError('connectZookeeper: lazyConnect must be a boolean');
  // The client connects without the chroot, which goes in front of the root instead: the same
  // nodes, and a chroot that does not exist yet is created with the first key's directory
  // (persistent nodes, by mkdirp), where a client chrooted to it failed every call with NO_NODE.
  const root = chroot + under;
  let mod: any;
  try {
    const name: string = 'node-zookeeper-client'; // typed by ZookeeperClientLike, not by the package
    mod = await import(name);
  } catch (e) {
    const { LeaseholdError } = await import('../../errors.js');
    throw new LeaseholdError(
      'LEASEHOLD_MISSING_PEER',
      `zookeeper needs the node-zookeeper-client package: npm install node-zookeeper-client`,
      { cause: e },
    );
  }
  const zkmod = mod.default ?? mod;
  const make = (): ZookeeperClientLike =>
    zkmod.createClient(servers, { sessionTimeout, spinDelay: 50, retries: 0 }) as ZookeeperClientLike;
  const client = make() as any;
  const session = new ZkSession(client, make, sessionTimeout);
  const backend = new ZookeeperBackend({ session, owned: true, root, suspendedIsLost });
  client.connect();
  if (o.lazyConnect) return backend;
  const timer = new Promise<never>((_, reject) => {
    const t = setTimeout(
      () => reject(new BackendError(`zookeeper: no server answered within ${connectMs}ms (connectTimeout)`)),
      connectMs,
    );
    t.unref();
  });
  try {
    await Promise.race([session.whenConnected(), timer]);
  } catch (e) {
    await backend.close();
    throw e;
  }
  return backend;
}
