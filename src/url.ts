/**
 * fromUrl: a backend and the client it owns, from a connection URL (12-factor apps, the CLI).
 * Client packages are loaded lazily; a missing one is named in the error. Passwords in URLs
 * never appear in an error message.
 */
import type { Backend } from './backend.js';
import { InvalidArgumentError, LeaseholdError } from './errors.js';
import { warn } from './events.js';
import { redactUrl } from './scrub.js';
import { closeWithin, connectError, load, owning, redisClient } from './url-clients.js';
import { race } from './wait.js';

export { redactUrl };

function parse(url: unknown): URL {
  if (typeof url !== 'string' || url.length === 0)
    throw new InvalidArgumentError('fromUrl: a URL must be a non-empty string');
  if (url.length > 4096) throw new InvalidArgumentError('fromUrl: the URL is longer than 4096 characters');
  try {
    return new URL(url);
  } catch {
    throw new InvalidArgumentError(`fromUrl: malformed URL "${redactUrl(url)}"`);
  }
}

/**
 * `host:port` of a redis:// URL as written, normalised without DNS: the host lowercased (an IPv6
 * address in the URL parser's canonical form), the default port 6379 filled in. So `LOCALHOST`
 * and `localhost:6379` are one node; `localhost` and `127.0.0.1` are two names, never resolved.
 */
function nodeOf(u: URL): string {
  const host = u.hostname.toLowerCase() || 'localhost';
  return `${host}:${u.port || '6379'}`;
}

/**
 * A redis:// URL's database: its path's number, 0 without one, NaN for any other path (the
 * client would SELECT NaN, or any text).
 */
function databaseOf(u: URL): number {
  return /^\/?$/.test(u.pathname) ? 0 : Number(/^\/(\d{1,9})$/.exec(u.pathname)?.[1] ?? NaN);
}

/** Two Redlock URLs naming one node would count it twice towards a majority: refused before connecting. */
function refuseSameNode(urls: readonly URL[]): void {
  const seen = new Map<string, number>();
  urls.forEach((u, i) => {
    const node = nodeOf(u);
    const j = seen.get(node);
    if (j !== undefined) {
      throw new InvalidArgumentError(
        `fromUrl: url[${i}] and url[${j}] both point at ${node}; Redlock needs independent nodes`,
      );
    }
    seen.set(node, i);
  });
}

const SUPPORTED =
  'redis://, rediss://, redis+cluster://, redis+sentinel://, several redis:// (Redlock), postgres://, postgresql://, zk://, etcd://, etcds://, sqlite:, memory:';

/**
 * Builds a backend and the client it owns. `close()` of the backend (called by `locks.close()`)
 * closes that client. Async because client packages load lazily and the connection is checked.
 */
export async function fromUrl(url: string | readonly string[]): Promise<Backend> {
  if (typeof url === 'string' && /^rediss?\+(cluster|sentinel):/i.test(url)) {
    // Redis Cluster / Sentinel: several addresses in one URL (src/redis-urls.ts)
    const { deploymentClient } = await import('./redis-urls.js');
    const { redis } = await import('./backends/redis/index.js');
    const c = await deploymentClient(url, { load, connectError, closeWithin });
    return owning(redis(c.client, c.session === undefined ? {} : { session: c.session }), c.close);
  }
  if (Array.isArray(url)) {
    if (url.length === 0) throw new InvalidArgumentError('fromUrl: the list of URLs is empty');
    const parsed = url.map(parse);
    if (url.length > 1 || parsed.some((u) => u.protocol !== 'redis:' && u.protocol !== 'rediss:')) {
      for (const u of parsed) {
        if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') {
          throw new InvalidArgumentError(
            `fromUrl: a list of URLs means Redlock; every URL must be redis:// or rediss://`,
          );
        }
      }
      if (url.length < 3) {
        throw new InvalidArgumentError(
          `fromUrl: Redlock needs at least 3 independent Redis nodes, got ${url.length} (use one URL for a single Redis)`,
        );
      }
      // each node's path is its database number, or nothing: checked as for one URL, before any connection
      parsed.forEach((u, i) => {
        if (Number.isNaN(databaseOf(u))) {
          throw new InvalidArgumentError(
            `fromUrl: the path must be a database number (/0, /1, ...) in url[${i}] "${redactUrl(url[i]!)}"`,
          );
        }
      });
      refuseSameNode(parsed);
      const { redlock } = await import('./backends/redlock/index.js');
      // Redlock survives a minority of its nodes down, and so does opening it: a node that does
      // not answer is kept (its client reconnects, and the node rejoins when it is back), said
      // on leasehold:warning; fewer than a majority connected is a failure, every client closed
      const opened = await Promise.allSettled(url.map((u) => redisClient(u, true)));
      const clients = opened.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
      const closeAll = () => Promise.allSettled(clients.map((c) => c.close()));
      const failed = opened.find((r) => r.status === 'rejected');
      const down = clients.filter((c) => c.down);
      const majority = Math.floor(url.length / 2) + 1;
      if (failed || clients.length - down.length < majority) {
        await closeAll();
        throw failed ? (failed as PromiseRejectedResult).reason : down[0]!.down;
      }
      // a database the node refused at connect would be an error event only (see the single URL
      // below): sent again on every node that answers, and a refusal fails the open
      const selected = await Promise.allSettled(
        clients.map((c, i) => {
          const db = databaseOf(parsed[i]!);
          return db > 0 && !c.down ? c.client.select(db) : undefined;
        }),
      );
      const refused = selected.findIndex((r) => r.status === 'rejected');
      if (refused >= 0) {
        await closeAll();
        throw connectError(
          redactUrl(url[refused]!),
          url[refused]!,
          (selected[refused] as PromiseRejectedResult).reason,
        );
      }
      for (const c of down) {
        warn({
          code: 'LEASEHOLD_NODE_DOWN',
          message: `redlock: ${c.down!.message}; going on with ${url.length - down.length} of ${url.length} nodes (it rejoins when it answers)`,
        });
      }
      try {
        return owning(redlock(clients.map((c) => c.client)), closeAll);
      } catch (e) {
        await closeAll(); // a client left open would keep the process from exiting
        throw e;
      }
    }
    return fromUrl(url[0]!);
  }
  if (typeof url === 'string' && /^zk:\/\//i.test(url) && url.length <= 4096) return zookeeperFromUrl(url);
  if (typeof url === 'string' && /^etcds?:\/\//i.test(url)) return etcdBackend(url);
  const u = parse(url);
  switch (u.protocol) {
    case 'memory:': {
      if (u.href !== 'memory:' && u.href !== 'memory://') {
        throw new InvalidArgumentError(
          `fromUrl: a memory: URL takes nothing after the scheme, got ${JSON.stringify(redactUrl(u.href))}`,
        );
      }
      const { memory } = await import('./backends/memory/index.js');
      return memory();
    }
    case 'redis:':
    case 'rediss:': {
      // leasehold's own `?session=1` is taken off before the URL reaches the client
      const { sessionParam } = await import('./redis-urls.js');
      const bad = (why: string) => new InvalidArgumentError(`fromUrl: ${why} in "${redactUrl(url as string)}"`);
      const session = sessionParam(u.searchParams, bad, false);
      if (u.searchParams.has('session')) u.searchParams.delete('session');
      const db = databaseOf(u);
      if (Number.isNaN(db)) throw bad('the path must be a database number (/0, /1, ...)');
      const { redis } = await import('./backends/redis/index.js');
      const c = await redisClient(session === undefined ? (url as string) : u.href);
      if (db > 0) {
        // a SELECT the client sent at connect and the server refused (no such database) would be
        // an error event only, and every command would go to database 0: it is sent again here
        try {
          await c.client.select(db);
        } catch (e) {
          await c.close();
          throw connectError(redactUrl(url as string), url as string, e);
        }
      }
      return owning(redis(c.client, session === undefined ? {} : { session }), c.close);
    }
    case 'postgres:':
    case 'postgresql:': {
      const safe = redactUrl(url as string);
      const { postgres } = await import('./backends/postgres/index.js');
      const { name, mod } = await load(['pg', 'postgres'], safe);
      if (name === 'pg') {
        const Pool = mod.Pool ?? mod.default?.Pool;
        const pool = new Pool({ connectionString: url, connectionTimeoutMillis: 5000 });
        pool.on('error', () => {}); // an idle client's error; the backend sees its own connections fail
        try {
          const c = await pool.connect();
          c.release();
        } catch (e) {
          await closeWithin(
            () => pool.end(),
            () => {},
          );
          throw connectError(safe, url as string, e);
        }
        return owning(postgres(pool).markOwned(), () =>
          closeWithin(
            () => pool.end(),
            () => {},
          ),
        );
      }
      const sql = (mod.default ?? mod)(url, { onnotice: () => {}, connect_timeout: 5 });
      try {
        await sql`select 1`;
      } catch (e) {
        await closeWithin(
          () => sql.end({ timeout: 1 }),
          () => {},
        );
        throw connectError(safe, url as string, e);
      }
      const backend = postgres(sql).markOwned();
      // a server given up at close(): its queries in flight are not waited for (timeout 0)
      return owning(backend, () =>
        closeWithin(
          () => sql.end({ timeout: backend.gaveUp ? 0 : 1 }),
          () => {},
        ),
      );
    }
    case 'sqlite:': {
      // sqlite:path, sqlite:/abs/path, sqlite: (the default file in the user's state directory)
      const { pathFromUrl } = await import('./backends/sqlite/url.js');
      const path = pathFromUrl(url as string);
      await load(['better-sqlite3'], url as string);
      const { sqlite } = await import('./backends/sqlite/index.js');
      const backend = sqlite(path);
      await backend.init().catch(async (e: unknown) => {
        await backend.close();
        throw e;
      });
      return backend;
    }
    default:
      throw new InvalidArgumentError(`fromUrl: unknown scheme "${u.protocol}" (supported: ${SUPPORTED})`);
  }
}

/** zk://host:port[,host:port…][/chroot]: a client of our own, closed by the backend's close(). */
async function zookeeperFromUrl(url: string): Promise<Backend> {
  const { parseZkUrl } = await import('./backends/zookeeper/url.js');
  const { hosts, options } = parseZkUrl(url);
  await load(['node-zookeeper-client'], url);
  const { connectZookeeper } = await import('./backends/zookeeper/index.js');
  try {
    return await connectZookeeper(hosts, options);
  } catch (e) {
    if (e instanceof LeaseholdError && e.code !== 'LEASEHOLD_BACKEND') throw e;
    throw connectError(url, url, e);
  }
}

/** `etcd://h:p[,h:p…][/namespace][?leaseTtl=…]` and `etcds://` (TLS): several members, one client. */
async function etcdBackend(url: string): Promise<Backend> {
  const safe = redactUrl(url);
  if (url.length > 4096) throw new InvalidArgumentError('fromUrl: the URL is longer than 4096 characters');
  const { parseEtcdUrl } = await import('./backends/etcd/url.js');
  const o = parseEtcdUrl(url);
  const { mod } = await load(['etcd3'], safe);
  const { etcd } = await import('./backends/etcd/index.js');
  const Etcd3 = mod.Etcd3 ?? mod.default?.Etcd3;
  const client = new Etcd3({ hosts: o.hosts, dialTimeout: 5000, ...(o.auth ? { auth: o.auth } : {}) });
  const close = () =>
    closeWithin(
      async () => client.close(),
      () => {},
    );
  try {
    await race(client.maintenance.status(), {
      ms: 5000,
      onTimeout: () => new Error('no member answered within 5s'),
    });
  } catch (e) {
    await close();
    throw connectError(safe, url, e);
  }
  try {
    const scoped = o.namespace ? client.namespace(o.namespace) : client;
    return owning(etcd(scoped, o.leaseTtl === undefined ? {} : { leaseTtl: o.leaseTtl }).markOwned(), close);
  } catch (e) {
    await close();
    throw e;
  }
}
