/**
 * Parent side of the backend adapters: the lock servers a backend's scenarios run against, and
 * one harness proxy in front of each (workers always dial the proxy; it passes bytes through
 * until a nemesis says otherwise).
 *
 *   redis     one owned redis-server (7401+), AOF with fsync always, so a SIGKILL + restart keeps
 *             the fence counter (the restart-empty scenario wipes it on purpose)
 *   redlock   five owned redis-servers without persistence (restarted nodes are re-seeded
 *             with `reseedFences` behind a closed proxy before they rejoin, as docs/redlock.md says)
 *   postgres  the shared PostgreSQL on 5432 (never stopped: only its sessions are terminated)
 *
 * Adding a backend = one more case here and in connect.ts, and its scenarios in scenarios.ts.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { Proxy } from './proxy.js';
import { PG_URL } from './resource.js';
import { faketimeWorks, freePort, haveRedisServer, ping, RedisServer } from './servers.js';
import type { BackendName, LockEndpoints, ResourceSpec } from './types.js';

export interface Env {
  backend: BackendName;
  servers: RedisServer[];
  proxies: Proxy[];
  endpoints: LockEndpoints;
  resource(name: string): ResourceSpec;
  /** Postgres: pg_terminate_backend on every session holding `fullKey`; resolves the workers' p numbers. */
  terminateHolders?(fullKey: string): Promise<number[]>;
  /** Redlock: a node restarted empty gets the others' fence counters before it takes lock traffic again. */
  reseed?(index: number): Promise<void>;
  /** Every server running, every proxy passing. */
  heal(): Promise<void>;
  close(): Promise<void>;
}

const SHARED_REDIS = 6379;

/** Why a backend cannot run here, or null. Under CI a missing service is a failure, never a skip. */
export async function unavailable(backend: BackendName): Promise<string | null> {
  if (!(await ping(SHARED_REDIS))) return `the shared Redis on ${SHARED_REDIS} (the resource) does not answer`;
  if (backend !== 'postgres' && !haveRedisServer()) return 'redis-server is not installed';
  if (backend === 'postgres') {
    const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2000 });
    try {
      await c.connect();
      await c.query('SELECT 1');
    } catch (e) {
      return `PostgreSQL at ${PG_URL} does not answer: ${(e as Error).message}`;
    } finally {
      await c.end().catch(() => {});
    }
  }
  return null;
}

async function proxied(ports: number[]): Promise<Proxy[]> {
  const proxies = ports.map((p) => new Proxy(p));
  await Promise.all(proxies.map((p) => p.listen()));
  return proxies;
}

export async function openEnv(backend: BackendName): Promise<Env> {
  const servers: RedisServer[] = [];
  const proxies: Proxy[] = [];
  const close = async () => {
    await Promise.all(proxies.map((p) => p.close()));
    await Promise.all(servers.map((s) => s.destroy()));
  };
  const heal = async () => {
    await Promise.all(servers.map((s) => s.heal()));
    for (const p of proxies) p.setMode({ kind: 'pass' });
  };
  const redisResource = (name: string): ResourceSpec => ({ kind: 'redis', port: SHARED_REDIS, name });
  try {
    if (backend === 'redis' || backend === 'redlock') {
      const n = backend === 'redis' ? 1 : 5;
      // redlock: node 0 runs under libfaketime where that works (the clock-jump scenario)
      const faketime = backend === 'redlock' && (await faketimeWorks()).ok;
      for (let i = 0; i < n; i++) {
        servers.push(
          new RedisServer(await freePort(), { persist: backend === 'redis', faketime: faketime && i === 0 }),
        );
      }
      await Promise.all(servers.map((s) => s.start()));
      proxies.push(...(await proxied(servers.map((s) => s.port))));
      const env: Env = {
        backend,
        servers,
        proxies,
        endpoints: { ports: proxies.map((p) => p.port) },
        resource: redisResource,
        heal,
        close,
      };
      if (backend === 'redlock') {
        env.reseed = async (index: number) => {
          const { reseedFences } = await import('../../src/backends/redlock/index.js');
          const open = (port: number) =>
            new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 });
          const target = open(servers[index]!.port);
          const sources = servers.filter((s, i) => i !== index && s.up && !s.stopped).map((s) => open(s.port));
          try {
            await Promise.all([target, ...sources].map((c) => c.connect()));
            await reseedFences(target, sources);
          } finally {
            for (const c of [target, ...sources]) c.disconnect();
          }
        };
      }
      return env;
    }
    // postgres: the shared server, behind a proxy
    const url = new URL(PG_URL);
    proxies.push(...(await proxied([Number(url.port || 5432)])));
    const admin = new pg.Pool({ connectionString: PG_URL, max: 1 });
    admin.on('error', () => {});
    return {
      backend,
      servers,
      proxies,
      endpoints: {
        ports: [proxies[0]!.port],
        pg: { user: decodeURIComponent(url.username || 'postgres'), database: url.pathname.slice(1) || 'test' },
      },
      resource: (name) => ({ kind: 'postgres', name }),
      async terminateHolders(fullKey: string): Promise<number[]> {
        const { advisoryKey, lockParts } = await import('../../src/backends/postgres/index.js');
        const { classid, objid } = lockParts(advisoryKey(fullKey));
        const r = await admin.query(
          `SELECT a.application_name AS app, pg_terminate_backend(l.pid) AS done
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::int8::oid
              AND l.objid = $2::int8::oid AND l.objsubid = 1`,
          [classid, objid],
        );
        return r.rows
          .map((row: { app: string }) => /^lhf-p(\d+)$/.exec(row.app)?.[1])
          .filter((x: string | undefined): x is string => x !== undefined)
          .map(Number);
      },
      heal,
      close: async () => {
        await close();
        await admin.end().catch(() => {});
      },
    };
  } catch (e) {
    await close();
    throw e;
  }
}
