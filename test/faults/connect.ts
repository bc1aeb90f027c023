/**
 * Worker side of the backend adapters: builds one backend from the worker's configuration, with
 * clients the worker owns (through the harness's proxies). Each backend is loaded only when used,
 * so one backend's module being broken never stops the others' scenarios.
 */
import { Etcd3 } from 'etcd3';
import { Cluster, Redis } from 'ioredis';
import pg from 'pg';
import 'node-zookeeper-client'; // loaded with the worker, as ioredis and pg are (its first import is slow)
import type { Backend } from '../../src/backend.js';
import type { WorkerConfig } from './types.js';

export interface Connected {
  backend: Backend;
  /** Closes the clients the worker opened (after `locks.close()`). */
  close(): Promise<void>;
}

function ioredis(port: number, cfg: WorkerConfig): Redis {
  const c = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    connectTimeout: 1000,
    commandTimeout: cfg.opTimeoutMs,
    maxRetriesPerRequest: 2,
    retryStrategy: () => 50,
    enableAutoPipelining: false,
  });
  c.on('error', () => {}); // reconnects on its own; a dead server is the point of the exercise
  return c;
}

// loaded ahead, while the worker waits for its first run: the etcd driver and etcd3's gRPC stack
// take long enough to load (through tsx, on a busy machine) to eat a short scenario; a failure
// here is reported by the run that needs it, never by the others
void import('../../src/backends/etcd/index.js').catch(() => {});

const quit = async (c: Redis) => {
  c.disconnect();
};

export async function connect(cfg: WorkerConfig, p: number): Promise<Connected> {
  switch (cfg.backend) {
    case 'redis': {
      const { redis } = await import('../../src/backends/redis/index.js');
      const client = ioredis(cfg.endpoints.ports[0]!, cfg);
      await client.connect().catch(() => {}); // a server that is down now comes back later
      // LEASEHOLD_FAULTS_REDIS_SESSION=1: the same scenarios in session mode (docs/redis.md, "Sessions")
      const backend = redis(client, { session: process.env.LEASEHOLD_FAULTS_REDIS_SESSION === '1' });
      return {
        backend: cfg.broken === 'release-no-token' ? breakRelease(backend, client) : backend,
        close: () => quit(client),
      };
    }
    case 'redlock': {
      const { redlock } = await import('../../src/backends/redlock/index.js');
      const clients = cfg.endpoints.ports.map((p) => ioredis(p, cfg));
      await Promise.all(clients.map((c) => c.connect().catch(() => {})));
      const backend = redlock(clients, { nodeTimeout: Math.min(500, cfg.opTimeoutMs) });
      return { backend, close: async () => void (await Promise.all(clients.map(quit))) };
    }
    case 'sentinel': {
      const { redis } = await import('../../src/backends/redis/index.js');
      const { SENTINEL_MASTER } = await import('../support/sentinel.js');
      const client = new Redis({
        sentinels: cfg.endpoints.ports.map((port) => ({ host: '127.0.0.1', port })),
        name: SENTINEL_MASTER,
        lazyConnect: true,
        connectTimeout: 1000,
        commandTimeout: cfg.opTimeoutMs,
        maxRetriesPerRequest: 2,
        retryStrategy: () => 50,
        enableAutoPipelining: false,
      });
      client.on('error', () => {}); // a failover is the point of the exercise
      await client.connect().catch(() => {});
      return { backend: redis(client), close: () => quit(client) };
    }
    case 'cluster': {
      const { redis } = await import('../../src/backends/redis/index.js');
      const client = new Cluster(
        cfg.endpoints.ports.map((port) => ({ host: '127.0.0.1', port })),
        {
          lazyConnect: true,
          enableAutoPipelining: false,
          clusterRetryStrategy: () => 100,
          retryDelayOnFailover: 100,
          retryDelayOnClusterDown: 100,
          redisOptions: { connectTimeout: 1000, commandTimeout: cfg.opTimeoutMs, maxRetriesPerRequest: 2 },
        },
      );
      client.on('error', () => {}); // a failover is the point of the exercise
      await client.connect().catch(() => {});
      return { backend: redis(client), close: async () => client.disconnect() };
    }
    case 'sqlite': {
      const { sqlite } = await import('../../src/backends/sqlite/index.js');
      const backend = sqlite(cfg.endpoints.sqlite!, { busyTimeout: cfg.opTimeoutMs });
      return { backend, close: async () => {} };
    }
    case 'zookeeper': {
      const { connectZookeeper } = await import('../../src/backends/zookeeper/index.js');
      // the session outlives a lease (ttl ≤ session timeout, as the backend requires)
      // every member's proxy: the client moves to another member when its own one fails
      const backend = await connectZookeeper(cfg.endpoints.ports.map((port) => `127.0.0.1:${port}`).join(','), {
        sessionTimeout: cfg.ttlMs * 2,
        lazyConnect: true, // a server that is down now comes back later
      });
      return { backend, close: async () => {} };
    }
    case 'etcd': {
      const { etcd } = await import('../../src/backends/etcd/index.js');
      const client = new Etcd3({
        hosts: cfg.endpoints.ports.map((port) => `http://127.0.0.1:${port}`),
        dialTimeout: cfg.opTimeoutMs,
      });
      // the shortest lease etcd grants (2s): a crashed holder's lock is freed after it
      const backend = etcd(client, { leaseTtl: '2s' });
      return { backend, close: async () => client.close() };
    }
    case 'postgres': {
      const { postgres } = await import('../../src/backends/postgres/index.js');
      const { PG_SCHEMA } = await import('./resource.js');
      const pgc = cfg.endpoints.pg ?? { user: 'postgres', database: 'test' };
      const pool = new pg.Pool({
        host: '127.0.0.1',
        port: cfg.endpoints.ports[0]!,
        user: pgc.user,
        database: pgc.database,
        max: 6,
        application_name: `lhf-p${p}`, // the harness terminates a holder's session by this name
        connectionTimeoutMillis: cfg.opTimeoutMs,
      });
      pool.on('error', () => {}); // a terminated backend errors its idle client; the backend reports the loss
      const backend = postgres(pool, { schema: PG_SCHEMA, timeout: cfg.opTimeoutMs });
      return { backend, close: () => pool.end().catch(() => {}) };
    }
  }
}

/**
 * The deliberately broken build: a release that skips the token check. It releases whatever
 * token holds the key now (it reads the current holder's token and releases with that), as a
 * plain `DEL` would. Only the release is broken; everything else is the real backend.
 */
function breakRelease(backend: Backend, client: Redis): Backend {
  const release = async (key: string, token: string): Promise<boolean> => {
    const current = await client.get(`{${key}}`).catch(() => null);
    return backend.release(key, current ?? token);
  };
  return new Proxy(backend, {
    get(target, prop, receiver) {
      if (prop === 'release') return release;
      const v = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}
