/** Client connections (loopback only) and the optional leasehold backends, loaded when present. */
import { moduleHref } from './leasehold.js';
import type { Etcd3 } from 'etcd3';
import { Redis, type RedisOptions } from 'ioredis';
import pg from 'pg';
import postgresJs from 'postgres';
import type { createClient } from 'redis';
import { closeOnStop } from './scope.js';
import { errText, within } from './stats.js';

export const HOST = '127.0.0.1';
export const PG_URL = 'postgres://postgres@127.0.0.1:5432/test';

/** An ioredis client, connected (fails fast when the server is down). */
export async function ioredis(port: number, opts: RedisOptions = {}): Promise<Redis> {
  const c = new Redis({ host: HOST, port, lazyConnect: true, maxRetriesPerRequest: 1, connectTimeout: 2000, ...opts });
  c.on('error', () => {}); // surfaced by the failing command instead
  closeOnStop(() => c.disconnect());
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

// etcd3 (gRPC) and node-redis are loaded when first used: each contended worker process loads
// this module, and the two took ~0.7 s of its ~1.7 s start (8 workers at once on 2 cores)
export type NodeRedis = ReturnType<typeof createClient>;

export async function nodeRedis(port: number): Promise<NodeRedis> {
  const { createClient } = await import('redis');
  const c: NodeRedis = createClient({ socket: { host: HOST, port, connectTimeout: 2000, reconnectStrategy: false } });
  c.on('error', () => {});
  closeOnStop(() => c.destroy());
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

/** The single etcd member of scripts/services.d/etcd.sh (LEASEHOLD_ETCD_HOSTS: host:port,…). */
export const ETCD_HOSTS = (process.env.LEASEHOLD_ETCD_HOSTS ?? `${HOST}:2379`).split(',');

/** An etcd3 client, checked with one call (fails fast when etcd is down). */
export async function etcdClient(): Promise<Etcd3> {
  const { Etcd3 } = await import('etcd3');
  const c = new Etcd3({ hosts: ETCD_HOSTS.map((h) => `http://${h}`), dialTimeout: 2000 });
  closeOnStop(() => c.close());
  try {
    await within(c.maintenance.status(), 3000, 'etcd status');
  } catch (e) {
    c.close();
    throw new Error(
      `etcd on ${ETCD_HOSTS.join(',')} is not reachable (run \`bash scripts/services.sh\`): ${errText(e)}`,
      {
        cause: e,
      },
    );
  }
  return c;
}

export async function pgClient(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 3000 });
  c.on('error', () => {});
  closeOnStop(() => c.end());
  await c.connect();
  return c;
}

export function pgPool(max: number): pg.Pool {
  const p = new pg.Pool({ connectionString: PG_URL, max, connectionTimeoutMillis: 3000 });
  p.on('error', () => {});
  closeOnStop(() => p.end());
  return p;
}

/** A postgres.js client (the other Postgres driver leasehold supports), `max` connections. */
export function postgresJsClient(max: number): postgresJs.Sql {
  const sql = postgresJs(PG_URL, { max, connect_timeout: 3, onnotice: () => {} });
  closeOnStop(() => sql.end({ timeout: 0 }));
  return sql;
}

/** A backend factory that other engineers are still building: present and working, or why not. */
export type Optional<F> = { ready: true; factory: F } | { ready: false; reason: string };

// the same build as the rest of the bench measures (lib/leasehold.ts)
const REDLOCK_MODULE = moduleHref('redlock');
const POSTGRES_MODULE = moduleHref('postgres');

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

/**
 * Counts the commands `c` sends (every one, or those `which` names, lower-case: 'evalsha', …),
 * on the client side: a shared server's INFO commandstats would count other clients' too.
 */
export function countCommands(c: Redis, which?: readonly string[]): { readonly count: number } {
  const counter = { count: 0 };
  const send = c.sendCommand.bind(c);
  c.sendCommand = ((...a: Parameters<typeof send>) => {
    if (!which || which.includes(String(a[0]?.name).toLowerCase())) counter.count++;
    return send(...a);
  }) as typeof c.sendCommand;
  return counter;
}
