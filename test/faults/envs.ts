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
 *   sqlite    a fresh database file, no server and no proxy (process faults only)
 *   zookeeper an owned 3-member ZooKeeper ensemble (tick 100 ms, transaction logs survive a SIGKILL),
 *             a proxy per member; members are killed and stopped one at a time, or all at once
 *   sentinel  the services' Sentinel setup (scripts/services.d/sentinel.sh), no proxy: clients
 *             ask the Sentinels for the master, so a proxy could not stay in the path
 *   etcd      an owned 3-member etcd cluster (test/support/etcd-cluster.ts), a proxy per member
 *   cluster   the services' Redis Cluster (scripts/services.d/cluster.sh, 3 masters + 3 replicas on
 *             7301-7306), no proxy: clients follow the slot table to whichever node serves a slot
 *
 * Adding a backend = one more case here and in connect.ts, and its scenarios in scenarios.ts.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { EtcdCluster } from '../support/etcd-cluster.js';
import { Proxy } from './proxy.js';
import { PG_SCHEMA, PG_URL } from './resource.js';
import { faketimeWorks, freePort, haveRedisServer, ping, RedisServer } from './servers.js';
import type { BackendName, LockEndpoints, ResourceSpec } from './types.js';
import { haveZookeeper, startCluster, type ZkServer } from '../support/zkserver.js';

/** What the nemeses use of a lock server (a redis-server or a ZooKeeper the harness owns). */
export type LockServer = Pick<
  RedisServer,
  'port' | 'up' | 'stopped' | 'start' | 'stop' | 'cont' | 'kill' | 'heal' | 'destroy' | 'wipe'
> & { options: { faketime?: boolean }; setClock?(offset: string): void };

export interface Env {
  backend: BackendName;
  servers: LockServer[];
  proxies: Proxy[];
  endpoints: LockEndpoints;
  resource(name: string): ResourceSpec;
  /** Postgres: pg_terminate_backend on every session holding `fullKey`; resolves the workers' p numbers. */
  terminateHolders?(fullKey: string, before: (targets: number[]) => void): Promise<number[]>;
  /** Redlock: a node restarted empty gets the others' fence counters before it takes lock traffic again. */
  reseed?(index: number): Promise<void>;
  /** etcd: the owned cluster. */
  etcd?: EtcdCluster;
  /** etcd, ZooKeeper: the members of an owned quorum (member-kill, member-stop act on one). */
  members?: Members;
  /**
   * etcd: revokes the lease of the holder of `fullKey` from outside, as `etcdctl lease revoke`
   * does; `before` runs just before the revoke is sent (the fault is recorded before it can act).
   */
  revokeHolder?(fullKey: string, before: () => void): Promise<boolean>;
  /**
   * Sentinel: records what the servers do on their own while a scenario runs (a failover the
   * harness did not cause); resolves once watching, to a function that stops it.
   */
  watch?(record: (f: string, value?: Record<string, unknown>) => void, now: () => number): Promise<() => Promise<void>>;
  /** Every server running, every proxy passing. */
  heal(): Promise<void>;
  close(): Promise<void>;
}

/** The members of a quorum the harness owns (etcd cluster, ZooKeeper ensemble), one at a time. */
export interface Members {
  readonly count: number;
  /** The member's client port (as the nemesis records it; workers dial its proxy). */
  port(i: number): number;
  /** SIGKILL, and wait for the process to be gone (its data stays). */
  kill(i: number): Promise<void>;
  /** Start again with its data; resolves once it serves. */
  restart(i: number): Promise<void>;
  stop(i: number): void;
  cont(i: number): void;
}

const SHARED_REDIS = 6379;

/** Why a backend cannot run here, or null. Under CI a missing service is a failure, never a skip. */
export async function unavailable(backend: BackendName): Promise<string | null> {
  if (!(await ping(SHARED_REDIS))) return `the shared Redis on ${SHARED_REDIS} (the resource) does not answer`;
  if (backend === 'etcd') {
    return spawnSync('etcd', ['--version']).status === 0
      ? null
      : 'the etcd binary is missing (scripts/services.sh installs etcd-server)';
  }
  if (backend === 'sqlite') {
    try {
      await import('better-sqlite3');
    } catch (e) {
      return `better-sqlite3 cannot be loaded: ${(e as Error).message}`;
    }
    return null;
  }
  if (backend === 'sentinel') {
    const { SENTINELS } = await import('../support/sentinel.js');
    for (const s of SENTINELS)
      if (!(await ping(s.port))) return `the Sentinel on ${s.port} does not answer (scripts/services.sh sentinel)`;
    return null;
  }
  if (backend === 'zookeeper') {
    return haveZookeeper() ? null : 'ZooKeeper is not installed (scripts/services.sh installs it)';
  }
  if (backend === 'cluster') {
    const { clusterNodes } = await import('../support/cluster.js');
    for (const n of clusterNodes())
      if (!(await ping(n.port)))
        return `the Redis Cluster node on ${n.port} does not answer (scripts/services.sh cluster)`;
    return null;
  }
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
  const servers: LockServer[] = [];
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
    if (backend === 'zookeeper') {
      const cluster = await startCluster(3, 100, 60_000);
      const zk = cluster.servers as ZkServer[];
      servers.push(...zk);
      await warmZookeeper(cluster.hosts).catch(async (e: unknown) => {
        await cluster.destroy();
        throw e;
      });
      proxies.push(...(await proxied(servers.map((s) => s.port))));
      return {
        backend,
        servers,
        proxies,
        members: {
          count: zk.length,
          port: (i) => zk[i]!.port,
          kill: (i) => zk[i]!.kill(),
          restart: (i) => zk[i]!.start(),
          stop: (i) => zk[i]!.stop(),
          cont: (i) => zk[i]!.cont(),
        },
        endpoints: { ports: proxies.map((p) => p.port) },
        resource: redisResource,
        heal, // every member at once: one started alone would wait for a quorum

        close: async () => {
          await close();
          await cluster.destroy();
        },
      };
    }
    if (backend === 'cluster') {
      const { CLUSTER_PORTS, healed, onNode } = await import('../support/failover.js');
      const { clusterNodes } = await import('../support/cluster.js');
      await healed('cluster'); // whole before the scenario, whatever an earlier file left
      // a node brought back syncs from its master at once (the default waits 5 s for more replicas)
      for (const port of CLUSTER_PORTS)
        await onNode(port, (r) => r.config('SET', 'repl-diskless-sync-delay', '0')).catch(() => {});
      return {
        backend,
        servers,
        proxies,
        endpoints: { ports: clusterNodes().map((n) => n.port) },
        resource: redisResource,
        heal: () => healed('cluster'),
        close,
      };
    }
    if (backend === 'sentinel') {
      const { SENTINELS } = await import('../support/sentinel.js');
      const { healed } = await import('../support/failover.js');
      await healed('sentinel');
      return {
        backend,
        servers,
        proxies,
        endpoints: { ports: SENTINELS.map((s) => s.port) },
        resource: redisResource,
        watch: async (record, now) => (await import('./sentinel-watch.js')).watchSentinels(record, now),
        heal: () => healed('sentinel'),
        close,
      };
    }
    if (backend === 'etcd') return await etcdEnv(heal, close, proxies, redisResource);
    if (backend === 'sqlite') {
      const dir = mkdtempSync(join(tmpdir(), 'leasehold-faults-'));
      return {
        backend,
        servers,
        proxies,
        endpoints: { ports: [], sqlite: join(dir, 'locks.db') },
        resource: redisResource,
        heal,
        close: async () => {
          await close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
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
      async terminateHolders(fullKey: string, before: (targets: number[]) => void): Promise<number[]> {
        const { advisoryKey, lockParts } = await import('../../src/backends/postgres/index.js');
        const { classid, objid } = lockParts(advisoryKey(fullKey, PG_SCHEMA)); // the backend's schema (connect.ts)
        // who holds it now, then the fault recorded against exactly those workers, then the
        // terminate: the server frees the lock (and the next in its queue holds it) before the
        // terminating statement answers, so the record must come first
        const held = await admin.query(
          `SELECT a.pid, a.application_name AS app
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::int8::oid
              AND l.objid = $2::int8::oid AND l.objsubid = 1`,
          [classid, objid],
        );
        const rows = held.rows as { pid: number; app: string }[];
        const targets = rows
          .map((row) => /^lhf-p(\d+)$/.exec(row.app)?.[1])
          .filter((x): x is string => x !== undefined)
          .map(Number);
        if (rows.length === 0) return [];
        before(targets);
        await admin.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [rows.map((r) => r.pid)]);
        return targets;
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

/** A fresh JVM answers its first requests slowly: a few hundred lock cycles before the workers come. */
async function warmZookeeper(hosts: string): Promise<void> {
  const { connectZookeeper } = await import('../../src/backends/zookeeper/index.js');
  const { createLocks } = await import('../../src/index.js');
  const backend = await connectZookeeper(hosts, { sessionTimeout: 10_000, connectTimeout: 30_000 });
  const locks = createLocks(backend, { ttl: 10_000, prefix: 'warm' });
  try {
    const until = performance.now() + 1500;
    for (let i = 0; i < 300 && performance.now() < until; i++) await (await locks.acquire(`w${i % 4}`)).release();
  } finally {
    await locks.close();
  }
}

async function etcdEnv(
  heal: () => Promise<void>,
  close: () => Promise<void>,
  proxies: Proxy[],
  resource: (name: string) => ResourceSpec,
): Promise<Env> {
  const cluster = await EtcdCluster.start(3);
  try {
    proxies.push(...(await proxied(cluster.members.map((m) => m.client))));
  } catch (e) {
    await cluster.stop();
    throw e;
  }
  const { Etcd3 } = await import('etcd3');
  const { entriesOf, rangeEnd } = await import('../../src/backends/etcd/keys.js');
  // the outsider talks to the members directly, never through the proxies
  const admin = new Etcd3({ hosts: cluster.hosts.map((h) => `http://${h}`), dialTimeout: 1000 });
  // healthy members may still be settling their first leader: the cluster takes writes before any run
  for (let i = 0; ; i++) {
    try {
      await admin.put('lhf-ready').value('1');
      await admin.delete().key('lhf-ready');
      break;
    } catch (e) {
      if (i >= 50) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return {
    backend: 'etcd',
    servers: [],
    proxies,
    etcd: cluster,
    members: {
      count: cluster.members.length,
      port: (i) => cluster.members[i]!.client,
      kill: (i) => cluster.kill(i),
      restart: (i) => cluster.restart(i),
      stop: (i) => cluster.stopMember(i),
      cont: (i) => cluster.cont(i),
    },
    endpoints: { ports: proxies.map((p) => p.port) },
    resource,
    async revokeHolder(fullKey: string, before: () => void): Promise<boolean> {
      const p = Buffer.from(entriesOf(fullKey));
      const r = await admin.kv.range({
        key: p,
        range_end: rangeEnd(p),
        sort_target: 'Create',
        sort_order: 'Ascend',
        limit: 1,
      });
      const kv = r.kvs[0];
      if (!kv || kv.lease === '0') return false;
      before();
      await admin.leaseClient.leaseRevoke({ ID: kv.lease });
      return true;
    },
    heal: async () => {
      await cluster.heal();
      await heal();
    },
    close: async () => {
      admin.close();
      await close();
      await cluster.stop();
    },
  };
}
