/** Client connections (loopback only) and the optional leasehold backends, loaded when present. */
import { Redis, type RedisOptions } from 'ioredis';
import pg from 'pg';
import { createClient } from 'redis';
import { errText, within } from './stats.js';

export const HOST = '127.0.0.1';
export const PG_URL = 'postgres://postgres@127.0.0.1:5432/test';

/** An ioredis client, connected (fails fast when the server is down). */
export async function ioredis(port: number, opts: RedisOptions = {}): Promise<Redis> {
  const c = new Redis({ host: HOST, port, lazyConnect: true, maxRetriesPerRequest: 1, connectTimeout: 2000, ...opts });
  c.on('error', () => {}); // surfaced by the failing command instead
  try {
    await c.connect();
  } catch (e) {
    c.disconnect();
    throw new Error(`redis on ${HOST}:${port} is not reachable (run \`bash scripts/services.sh\`): ${errText(e)}`, {
      cause: e,
    });
  }
  return c;
}

export async function quit(c: Redis): Promise<void> {
  try {
    await within(c.quit(), 1000, 'quit');
  } catch {
    c.disconnect();
  }
}

const newNodeRedis = (port: number) =>
  createClient({ socket: { host: HOST, port, connectTimeout: 2000, reconnectStrategy: false } });
export type NodeRedis = ReturnType<typeof newNodeRedis>;

export async function nodeRedis(port: number): Promise<NodeRedis> {
  const c = newNodeRedis(port);
  c.on('error', () => {});
  await c.connect();
  return c;
}

export async function closeNodeRedis(c: NodeRedis): Promise<void> {
  try {
    await within(c.close(), 1000, 'close');
  } catch {
    c.destroy();
  }
}

export async function pgClient(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 3000 });
  c.on('error', () => {});
  await c.connect();
  return c;
}

export function pgPool(max: number): pg.Pool {
  const p = new pg.Pool({ connectionString: PG_URL, max, connectionTimeoutMillis: 3000 });
  p.on('error', () => {});
  return p;
}

/** A backend factory that other engineers are still building: present and working, or why not. */
export type Optional<F> = { ready: true; factory: F } | { ready: false; reason: string };

// Computed specifiers: the bench type-checks and runs whether or not these modules exist yet.
const REDLOCK_MODULE = new URL('../../src/backends/redlock/index.ts', import.meta.url).href;
const POSTGRES_MODULE = new URL('../../src/backends/postgres/index.ts', import.meta.url).href;

export type RedlockFactory = (clients: unknown[], opts?: Record<string, unknown>) => any;
export type PostgresFactory = (pool: unknown, opts?: Record<string, unknown>) => any;

async function load<F>(href: string, name: string): Promise<Optional<F>> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(href)) as Record<string, unknown>;
  } catch (e) {
    return { ready: false, reason: `module not loadable: ${errText(e).split('\n')[0]}` };
  }
  const f = mod[name];
  if (typeof f !== 'function') return { ready: false, reason: `module does not export a ${name}() factory yet` };
  return { ready: true, factory: f as F };
}

export const loadRedlock = () => load<RedlockFactory>(REDLOCK_MODULE, 'redlock');
export const loadPostgres = () => load<PostgresFactory>(POSTGRES_MODULE, 'postgres');

/** Runs `probe` (one acquire + release); a failure makes the optional backend "not ready". */
export async function probe<F>(opt: Optional<F>, run: (f: F) => Promise<void>): Promise<Optional<F>> {
  if (!opt.ready) return opt;
  try {
    await within(run(opt.factory), 10_000, 'probe');
    return opt;
  } catch (e) {
    return { ready: false, reason: `factory present but a probe acquire/release failed: ${errText(e)}` };
  }
}

/** Deletes every key matching `*<marker>*` (the run's own keys: locks, fence counters, queues). */
export async function purge(c: Redis, marker: string): Promise<number> {
  let cursor = '0';
  let n = 0;
  do {
    const [next, keys] = await c.scan(cursor, 'MATCH', `*${marker}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length) n += await c.unlink(...keys);
  } while (cursor !== '0');
  return n;
}
