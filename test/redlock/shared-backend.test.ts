/**
 * Two Locks on one Redlock backend share its wake channel and so its place in a key's waiter
 * queue: one Locks' waiter that gives up must not take the other's place (or its wake-up state)
 * with it. A waiter that lost them is woken only by its refresh bound (REFRESH_MS).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { redlock } from '../../src/backends/redlock/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { eventually, requireShared } from './nodes.js';

const PORTS = [7001, 7002, 7003];
const prefix = `lh-rlshared-${randomUUID().slice(0, 8)}`;
const clients: Redis[] = [];
const open: Locks[] = [];
const make = () => {
  const cs = PORTS.map((p) => new Redis(p, '127.0.0.1', { maxRetriesPerRequest: 1 }));
  clients.push(...cs);
  return cs;
};
beforeAll(() => requireShared(PORTS));
afterAll(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  for (const c of clients) c.disconnect();
});

test("a waiter that gives up does not deafen the other Locks' waiter on the same key", async () => {
  const key = 'give-up';
  const admin = make();
  const shared = redlock(make());
  const a = createLocks(shared, { prefix, ttl: '30s' });
  const b = createLocks(shared, { prefix, ttl: '30s' });
  const h = createLocks(redlock(make()), { prefix, ttl: '30s' });
  open.push(a, b, h);
  const held = await h.acquire(key);
  const waiting = b.acquire(key, { wait: '20s' });
  waiting.catch(() => {});
  const queued = async () =>
    (await Promise.all(admin.map((c) => c.zcard(`{${prefix}:${key}}:q`)))).every((n) => n === 1);
  await eventually(queued, 5000, 'b queued on every node');
  // the other Locks' waiter on the key gives up while b waits
  await expect(a.acquire(key, { wait: '100ms' })).rejects.toMatchObject({ code: 'LEASEHOLD_LOCK_TIMEOUT' });
  expect(await queued()).toBe(true); // b's place (the backend's) is still there
  const releasedAt = performance.now();
  await held.release(); // wakes the head: b's backend
  const lease = await waiting;
  const delay = performance.now() - releasedAt;
  console.log(`[redlock shared-backend] granted ${Math.round(delay)} ms after the release`);
  expect(delay).toBeLessThan(500); // pushed: not its refresh bound (1 s after its last attempt)
  await lease.release();
}, 30_000);

test("a waiter that is granted and releases hands over to the other Locks' waiter on the same key", async () => {
  const key = 'granted';
  const admin = make();
  const shared = redlock(make());
  const a = createLocks(shared, { prefix, ttl: '30s' });
  const b = createLocks(shared, { prefix, ttl: '30s' });
  const h = createLocks(redlock(make()), { prefix, ttl: '30s' });
  open.push(a, b, h);
  const held = await h.acquire(key);
  const first = a.acquire(key, { wait: '20s' });
  const second = b.acquire(key, { wait: '20s' });
  first.catch(() => {});
  second.catch(() => {});
  const queued = async () =>
    (await Promise.all(admin.map((c) => c.zcard(`{${prefix}:${key}}:q`)))).every((n) => n === 1);
  await eventually(queued, 5000, 'the shared backend queued on every node');
  await held.release();
  // one of the two is granted; its release must wake the other (same backend, same place)
  const { winner, other } = await Promise.race([
    first.then((l) => ({ winner: l, other: second })),
    second.then((l) => ({ winner: l, other: first })),
  ]);
  const releasedAt = performance.now();
  await winner.release();
  const lease = await other;
  const delay = performance.now() - releasedAt;
  console.log(`[redlock shared-backend] granted ${Math.round(delay)} ms after the other waiter's release`);
  expect(delay).toBeLessThan(500); // pushed: not its refresh bound (1 s after its last attempt)
  await lease.release();
}, 30_000);
