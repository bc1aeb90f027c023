/**
 * Failover under Redis Sentinel (issue #18.2): the master that holds a lock is SIGKILLed and
 * Sentinel promotes the replica. Whatever survived, the next holder's fence is higher than every
 * earlier fence, the old holder either keeps a lock that really survived or is signalled lost at
 * its next renewal, and two holders never believe they hold the lock with the same fence.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks, fromUrl, LeaseLostError, type Locks } from '../../src/index.js';
import { failover, healed, onNode, replicated, sentinelMasterPort, until } from '../support/failover.js';
import type { ClientKind } from '../support/redis.js';
import { SENTINEL_MASTER, SENTINEL_URL, SENTINELS, SentinelClients } from '../support/sentinel.js';

const clients = new SentinelClients();
beforeAll(() => healed('sentinel'), 120_000);
afterAll(() => clients.closeAll());

const masterPort = sentinelMasterPort;

/** Whether grants are fenced with TIME-seeded counters (max(counter + 1, TIME in µs)). */
async function timeSeeded(locks: Locks): Promise<boolean> {
  const l = await locks.acquire(`probe-${randomUUID()}`);
  await l.release();
  return l.fence > 1_000_000_000_000n;
}

describe.each(['ioredis', 'node-redis'] as ClientKind[])('Sentinel failover on %s', (kind) => {
  test(
    'a lock that reached the replica survives the failover; the next holder is fenced higher',
    { timeout: 120_000 },
    async () => {
      const prefix = `lh-fo-${randomUUID().slice(0, 8)}`;
      const a = createLocks(redis(await clients.make(kind)), { prefix, ttl: '10s' });
      const b = createLocks(redis(await clients.make(kind)), { prefix, ttl: '10s' });
      try {
        const lease = await a.acquire('k');
        // the grant is on the replica before the master dies (what WAIT 1 confirms)
        await replicated(await masterPort());
        await failover();
        // the old holder keeps a lock that survived: renewals reach the new master
        await until('a renewal on the new master', async () =>
          ((await b.inspect('k'))?.remainingMs ?? 0) > 8000 ? true : undefined,
        );
        expect(lease.held).toBe(true);
        expect(await b.tryAcquire('k')).toBeNull();
        await lease.extend();
        await lease.release();
        const next = await b.acquire('k', { wait: '10s' });
        expect(next.fence > lease.fence).toBe(true);
        await next.release();
      } finally {
        await Promise.all([a.close(), b.close()]);
        await healed('sentinel');
      }
    },
  );

  test(
    'a lock the replica never saw: the old holder is lost at its next renewal, fences still rise',
    { timeout: 120_000 },
    async () => {
      const prefix = `lh-fo-${randomUUID().slice(0, 8)}`;
      const a = createLocks(redis(await clients.make(kind)), { prefix, ttl: '6s' });
      const b = createLocks(redis(await clients.make(kind)), { prefix, ttl: '6s' });
      try {
        // fences across a lagging replica rise only with TIME-seeded counters (issue #10.2); with
        // plain INCR the promoted replica would hand out an earlier fence again
        expect(await timeSeeded(a)).toBe(true);
        const lease = await a.acquire('k');
        const lost = new Promise<unknown>((r) => lease.signal.addEventListener('abort', () => r(lease.signal.reason)));
        // asynchronous replication lost the grant: the replica has neither the lock nor the fence bump
        const m = await masterPort();
        await replicated(m);
        const replica = await onNode(SENTINELS[0]!.port, async (s) => {
          const rs = (await s.call('SENTINEL', 'REPLICAS', SENTINEL_MASTER)) as string[][];
          return Number(rs.map((x) => x[x.indexOf('port') + 1])[0]);
        });
        await onNode(replica, async (r) => {
          await r.config('SET', 'replica-read-only', 'no');
          await r.del(`{${prefix}:k}`);
          await r.set(`{${prefix}:k}:fence`, String(lease.fence - 1n));
          await r.config('SET', 'replica-read-only', 'yes');
        });
        await failover();
        const next = await b.acquire('k', { wait: '20s' });
        // two holders at once only with different fences, the newer one higher
        if (lease.held) expect(next.fence).not.toBe(lease.fence);
        expect(next.fence > lease.fence).toBe(true);
        expect(await lost).toBeInstanceOf(LeaseLostError);
        expect(lease.held).toBe(false);
        await next.release();
      } finally {
        await Promise.all([a.close(), b.close()]);
        await healed('sentinel');
      }
    },
  );
});

describe('fromUrl redis+sentinel://', () => {
  test('builds a backend on the current master whose close() closes the client it owns', async () => {
    const backend = await fromUrl(SENTINEL_URL);
    const locks = createLocks(backend, { prefix: `lh-surl-${randomUUID().slice(0, 8)}` });
    const lease = await locks.acquire('k');
    expect(lease.held).toBe(true);
    expect((await locks.inspect('k'))?.fence).toBe(lease.fence);
    await locks.close();
    expect(lease.held).toBe(false);
  });
});
