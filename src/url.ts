/**
 * fromUrl: a backend and the client it owns, from a connection URL (12-factor apps, the CLI).
 * Client packages are loaded lazily; a missing one is named in the error. Passwords in URLs
 * never appear in an error message.
 */
import type { Backend } from './backend.js';
import { BackendError, InvalidArgumentError, LeaseholdError } from './errors.js';

/** Hides the userinfo (user:password@) of a URL, also of one that does not parse. */
export function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/?#]*@/i, '$1***@');
}

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

const SUPPORTED = 'redis://, rediss://, several redis:// (Redlock), postgres://, postgresql://, memory:';

async function load(names: readonly string[], forUrl: string): Promise<{ name: string; mod: any }> {
  for (const name of names) {
    try {
      return { name, mod: await import(name) };
    } catch (e) {
      if (
        (e as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND' &&
        (e as { code?: string }).code !== 'MODULE_NOT_FOUND'
      )
        throw e;
    }
  }
  throw new LeaseholdError(
    'LEASEHOLD_MISSING_PEER',
    `fromUrl("${forUrl}") needs the ${names.join(' or ')} package: npm install ${names[0]}`,
  );
}

/** Wraps `close()` so it also closes the client the backend was built with. */
function owning<B extends Backend>(backend: B, closeClient: () => Promise<unknown>): B {
  const closeBackend = backend.close.bind(backend);
  backend.close = async () => {
    try {
      await closeBackend();
    } finally {
      await closeClient().catch(() => {});
    }
  };
  return backend;
}

async function redisClient(url: string): Promise<{ client: any; close: () => Promise<unknown> }> {
  const safe = redactUrl(url);
  const { name, mod } = await load(['ioredis', 'redis'], safe);
  if (name === 'ioredis') {
    const Redis = mod.Redis ?? mod.default;
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 2, connectTimeout: 5000 });
    client.on('error', () => {}); // reconnects on its own; each command reports its own failure
    try {
      await client.connect();
    } catch (e) {
      client.disconnect();
      throw new BackendError(`could not connect to ${safe}: ${redactUrl(String((e as Error).message))}`);
    }
    return { client, close: () => client.quit() };
  }
  const client = mod.createClient({ url, socket: { connectTimeout: 5000 } });
  client.on('error', () => {});
  try {
    await client.connect();
  } catch (e) {
    await client.destroy?.();
    throw new BackendError(`could not connect to ${safe}: ${redactUrl(String((e as Error).message))}`);
  }
  return { client, close: () => (client.close ? client.close() : client.quit()) };
}

/**
 * Builds a backend and the client it owns. `close()` of the backend (called by `locks.close()`)
 * closes that client. Async because client packages load lazily and the connection is checked.
 */
export async function fromUrl(url: string | readonly string[]): Promise<Backend> {
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
      const { redlock } = await import('./backends/redlock/index.js');
      const opened = await Promise.allSettled(url.map((u) => redisClient(u)));
      const clients = opened.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
      const closeAll = () => Promise.allSettled(clients.map((c) => c.close()));
      const failed = opened.find((r) => r.status === 'rejected');
      if (failed) {
        await closeAll();
        throw (failed as PromiseRejectedResult).reason;
      }
      return owning(redlock(clients.map((c) => c.client)), closeAll);
    }
    return fromUrl(url[0]!);
  }
  const u = parse(url);
  switch (u.protocol) {
    case 'memory:': {
      const { memory } = await import('./backends/memory/index.js');
      return memory();
    }
    case 'redis:':
    case 'rediss:': {
      const { redis } = await import('./backends/redis/index.js');
      const c = await redisClient(url as string);
      return owning(redis(c.client), c.close);
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
          await pool.end().catch(() => {});
          throw new BackendError(`could not connect to ${safe}: ${redactUrl(String((e as Error).message))}`);
        }
        return owning(postgres(pool), () => pool.end());
      }
      const sql = (mod.default ?? mod)(url, { onnotice: () => {}, connect_timeout: 5 });
      try {
        await sql`select 1`;
      } catch (e) {
        await sql.end({ timeout: 1 }).catch(() => {});
        throw new BackendError(`could not connect to ${safe}: ${redactUrl(String((e as Error).message))}`);
      }
      return owning(postgres(sql), () => sql.end({ timeout: 5 }));
    }
    case 'zk:':
    case 'etcd:':
    case 'sqlite:':
      throw new LeaseholdError(
        'LEASEHOLD_UNSUPPORTED',
        `fromUrl: ${u.protocol}// backends are not available in this version (supported: ${SUPPORTED})`,
      );
    default:
      throw new InvalidArgumentError(`fromUrl: unknown scheme "${u.protocol}" (supported: ${SUPPORTED})`);
  }
}
