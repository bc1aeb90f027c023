/**
 * Two Locks on one Redis backend share its wake-up channel: each one's waiters on a lock key must
 * keep hearing their hand-overs whatever the other Locks' waiter on that key does (gives up, is
 * granted). A waiter that stopped hearing them would be woken only by its refresh bound, after
 * its claim had lapsed.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { redis, redisKeys } from '../../src/backends/redis/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Clients, type ClientKind } from '../support/redis.js';
import { until } from '../support/until.js';

const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-shared-${randomUUID().slice(0, 8)}`;
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

describe.each(['ioredis', 'node-redis'] as ClientKind[])('two Locks on one backend (%s)', (kind) => {
  test("a waiter that gives up does not deafen the other Locks' waiter on the same key", async () => {
    const key = `give-up-${kind}`;
    const admin = await clients.make('ioredis');
    // a long place: the refresh bound (10 s) is far from a pushed hand-over (milliseconds)
    const shared = redis(await clients.make(kind), { placeTtl: '30s' });
    const a = createLocks(shared, { prefix, ttl: '30s' });
    const b = createLocks(shared, { prefix, ttl: '30s' });
    const h = createLocks(redis(await clients.make(kind)), { prefix, ttl: '30s' });
    open.push(a, b, h);
    const held = await h.acquire(key);
    const waiting = b.acquire(key, { wait: '20s' });
    waiting.catch(() => {});
    await until('b queued', async () => (await admin.zcard(redisKeys(`${prefix}:${key}`).q)) === 1, 5000);
    // the other Locks' waiter on the key gives up while b waits
    await expect(a.acquire(key, { wait: '100ms' })).rejects.toMatchObject({ code: 'LEASEHOLD_LOCK_TIMEOUT' });
    const releasedAt = performance.now();
    await held.release(); // hands the lock to b, and tells b's backend
    const lease = await waiting;
    const delay = performance.now() - releasedAt;
    console.log(`[shared-backend] ${kind}: granted ${Math.round(delay)} ms after the release`);
    expect(delay).toBeLessThan(2000); // pushed: not its 10 s refresh bound
    await lease.release();
    // and no waiter is left on record once both are done
    const waits = (shared as unknown as { wakeups: { waits: { owners: Map<string, unknown> } } }).wakeups.waits;
    expect(waits.owners.size).toBe(0);
  }, 30_000);
});
