/**
 * Failover in Redis Cluster (issue #18.1): the master that serves a held lock's slot is SIGKILLed
 * and its replica is promoted. A lock that reached the replica survives: its holder keeps it
 * (renewals follow the slot to the new master), and the next holder's fence is higher.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks } from '../../src/index.js';
import { ClusterClients, ownerOf } from '../support/cluster.js';
import { healed, killNode, onNode, replicated, until } from '../support/failover.js';
import type { ClientKind } from '../support/redis.js';

const clients = new ClusterClients();
beforeAll(() => healed('cluster'), 300_000);
afterAll(() => clients.closeAll());

describe.each(['ioredis', 'node-redis'] as ClientKind[])('Redis Cluster failover on %s', (kind) => {
  test(
    'the master of a held lock dies; its replica takes over with the lock; fences rise',
    { timeout: 300_000 },
    async () => {
      const prefix = `lh-cfo-${randomUUID().slice(0, 8)}`;
      const a = createLocks(redis(await clients.make(kind)), { prefix, ttl: '10s' });
      const b = createLocks(redis(await clients.make(kind)), { prefix, ttl: '10s' });
      const admin = await clients.make('ioredis');
      try {
        const lease = await a.acquire('k');
        const owner = await ownerOf(admin, `{${prefix}:k}`);
        const port = Number(owner.split(':')[1]);
        await replicated(port); // the grant is on the replica
        killNode(port);
        // promotion: another node now serves the slot and the cluster is ok again
        await until('promotion', async () => {
          const now = await ownerOf(admin, `{${prefix}:k}`);
          if (now === owner) return undefined;
          const info = await onNode(Number(now.split(':')[1]), (r) => r.cluster('INFO'));
          return /cluster_state:ok/.test(String(info)) ? now : undefined;
        });
        // the holder's renewals reach the new master
        await until('a renewal on the new master', async () =>
          ((await b.inspect('k'))?.remainingMs ?? 0) > 8000 ? true : undefined,
        );
        expect(lease.held).toBe(true);
        expect(await b.tryAcquire('k')).toBeNull();
        await lease.release();
        const next = await b.acquire('k', { wait: '10s' });
        expect(next.fence > lease.fence).toBe(true);
        await next.release();
      } finally {
        await Promise.all([a.close(), b.close()]);
        await healed('cluster');
      }
    },
  );
});
