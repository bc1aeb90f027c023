/**
 * `fromUrl` for the Redis deployments with several addresses, which WHATWG URLs cannot hold:
 *
 *   redis+cluster://[user[:password]@]host:port[,host:port…]           Redis Cluster (seed nodes)
 *   redis+sentinel://[user[:password]@]host:port[,host:port…][/master] Sentinel (default "mymaster")
 *
 * `rediss+cluster://` and `rediss+sentinel://` connect with TLS. The credentials are the data
 * nodes' (ACL user or `requirepass`); Sentinels are reached without a password. Loaded lazily
 * by src/url.ts, which passes its helpers in (no import cycle).
 */
import { InvalidArgumentError } from './errors.js';
import { redactUrl } from './scrub.js';
import { race } from './wait.js';

export interface RedisDeployment {
  readonly kind: 'cluster' | 'sentinel';
  readonly tls: boolean;
  readonly username?: string;
  readonly password?: string;
  readonly nodes: readonly { host: string; port: number }[];
  /** Sentinel: the monitored master's name. */
  readonly name: string;
  /** `?session=1`: session renewal (RedisOptions.session); Sentinel only. */
  readonly session?: boolean;
}

/**
 * leasehold's own query parameter on Redis URLs, `session=1|true|0|false` (RedisOptions.session).
 * On the cluster/sentinel URLs (leasehold's own format) any other parameter is refused; a plain
 * redis:// URL's other parameters are the client's (ioredis reads some). `bad` builds the error.
 */
export function sessionParam(
  params: URLSearchParams,
  bad: (why: string) => Error,
  strict: boolean,
): boolean | undefined {
  let session: boolean | undefined;
  for (const [k, v] of params) {
    if (k !== 'session') {
      if (strict) throw bad(`unknown query parameter "${k}" (leasehold knows "session")`);
      continue;
    }
    if (v === '1' || v === 'true') session = true;
    else if (v === '0' || v === 'false') session = false;
    else throw bad(`session must be 1, true, 0 or false, not "${v}"`);
  }
  return session;
}

const SCHEME = /^(rediss?)\+(cluster|sentinel):\/\/(.*)$/i;

export const isRedisDeploymentUrl = (url: string): boolean => SCHEME.test(url);

export function parseRedisDeployment(url: string): RedisDeployment {
  const m = SCHEME.exec(url);
  const bad = (why: string) => new InvalidArgumentError(`fromUrl: ${why} in "${redactUrl(url)}"`);
  if (!m) throw bad('not a redis+cluster:// or redis+sentinel:// URL');
  const kind = m[2]!.toLowerCase() as 'cluster' | 'sentinel';
  let rest = m[3]!;
  // the credentials first, up to the last '@' (no host, path or parameter holds one): a password
  // may hold '?', '#' or '/' unescaped, and no error may quote a piece of it as a parameter
  let username: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf('@');
  if (at >= 0) {
    const info = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = info.indexOf(':');
    try {
      username = decodeURIComponent(colon < 0 ? info : info.slice(0, colon)) || undefined;
      password = colon < 0 ? undefined : decodeURIComponent(info.slice(colon + 1));
    } catch {
      throw bad('malformed credentials');
    }
  }
  if (rest.includes('#')) throw bad('fragments are not supported');
  const q = rest.indexOf('?');
  const session = q < 0 ? undefined : sessionParam(new URLSearchParams(rest.slice(q + 1)), bad, true);
  if (q >= 0) rest = rest.slice(0, q);
  if (session && kind === 'cluster')
    throw bad('session=1 needs a single server or Sentinel (on Redis Cluster leases are renewed per master)');
  const slash = rest.indexOf('/');
  const hosts = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? '' : rest.slice(slash + 1);
  if (kind === 'cluster' && path !== '') throw bad('a cluster URL has no path (Redis Cluster has one database)');
  let name = '';
  if (kind === 'sentinel') {
    try {
      name = decodeURIComponent(path) || 'mymaster';
    } catch {
      throw bad('malformed master name (a bad %-escape)');
    }
  }
  if (name.includes('/')) throw bad('the master name cannot contain "/"');
  const nodes = hosts.split(',').map((hp) => {
    const h = /^(\[[0-9a-f:.]+\]|[^:[\]]+):(\d{1,5})$/i.exec(hp.trim());
    const port = h ? Number(h[2]) : 0;
    if (!h || port < 1 || port > 65535) throw bad(`"${hp}" is not host:port`);
    return { host: h[1]!.replace(/^\[|\]$/g, ''), port };
  });
  return {
    kind,
    tls: m[1]!.toLowerCase() === 'rediss',
    username,
    password,
    nodes,
    name,
    ...(session === undefined ? {} : { session }),
  };
}

/**
 * How long fromUrl waits for a Cluster or Sentinel client to connect. A Sentinel client retries
 * unreachable sentinels forever by default (ioredis' sentinelRetryStrategy, node-redis' too), so
 * its connect() would never settle; the client's own retries stay as they are once connected.
 */
export const CONNECT_MS = 5000;

const connectWithin = (connect: () => Promise<unknown>): Promise<unknown> =>
  race(connect(), { ms: CONNECT_MS, onTimeout: () => new Error(`no answer within ${CONNECT_MS}ms`) });

export interface UrlHelpers {
  load(names: readonly string[], forUrl: string): Promise<{ name: string; mod: any }>;
  connectError(safe: string, url: string, e: unknown): Error;
  closeWithin(polite: () => Promise<unknown>, drop: () => unknown): Promise<void>;
}

/** An ioredis (preferred) or node-redis client for the deployment, connected; and how to close it. */
export async function deploymentClient(
  url: string,
  h: UrlHelpers,
): Promise<{ client: any; close: () => Promise<unknown>; session?: boolean }> {
  const d = parseRedisDeployment(url);
  const session = d.session === undefined ? {} : { session: d.session };
  const safe = redactUrl(url);
  const { name, mod } = await h.load(['ioredis', 'redis'], safe);
  const auth = { ...(d.username ? { username: d.username } : {}), ...(d.password ? { password: d.password } : {}) };
  let client: any;
  if (name === 'ioredis') {
    const common = { lazyConnect: true, maxRetriesPerRequest: 2, connectTimeout: 5000, ...(d.tls ? { tls: {} } : {}) };
    if (d.kind === 'cluster') {
      const Cluster = mod.Cluster ?? mod.default?.Cluster;
      client = new Cluster(d.nodes, {
        lazyConnect: true,
        redisOptions: { ...common, ...auth },
        clusterRetryStrategy: (times: number) => (times > 10 ? null : 200),
      });
    } else {
      const Redis = mod.Redis ?? mod.default;
      client = new Redis({ ...common, ...auth, sentinels: d.nodes, name: d.name, enableTLSForSentinelMode: d.tls });
    }
    client.on('error', () => {});
    try {
      await connectWithin(() => client.connect());
    } catch (e) {
      client.disconnect();
      throw h.connectError(safe, url, e);
    }
    return {
      client,
      ...session,
      close: () =>
        h.closeWithin(
          () => client.quit(),
          () => client.disconnect(),
        ),
    };
  }
  const socket = { connectTimeout: 5000, ...(d.tls ? { tls: true } : {}) };
  client =
    d.kind === 'cluster'
      ? mod.createCluster({
          rootNodes: d.nodes.map((n) => ({ socket: { host: n.host, port: n.port, ...socket } })),
          defaults: { ...auth, socket },
        })
      : mod.createSentinel({
          name: d.name,
          sentinelRootNodes: d.nodes,
          nodeClientOptions: { ...auth, socket },
        });
  client.on('error', () => {});
  try {
    await connectWithin(() => client.connect());
  } catch (e) {
    await Promise.resolve(client.destroy?.()).catch(() => {});
    throw h.connectError(safe, url, e);
  }
  return {
    client,
    ...session,
    close: () =>
      h.closeWithin(
        () => client.close(),
        () => client.destroy(),
      ),
  };
}
