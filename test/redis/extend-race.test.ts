/**
 * A caller's extend() racing the keeper's renewal, on the real Redis (127.0.0.1:6379): each call
 * reaches the server at once, only the reply of the extend is held back (a slow way back).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, expect, test } from 'vitest';
import type { Backend, ExtendItem } from '../../src/backend.js';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks, LeaseLostError, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-extend-race-${randomUUID().slice(0, 8)}`;
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  await clients.closeAll();
});

test('no renewal is sent while a longer extend() is in flight: the lease never believes more than Redis holds', async () => {
  const inner = redis(await clients.make('ioredis'));
  const sent: number[] = [];
  let release: (() => void) | null = null;
  const backend: Backend = Object.assign(Object.create(inner) as Backend, {
    extend: async (items: readonly ExtendItem[]) => {
      for (const it of items) sent.push(it.ttlMs);
      const r = await inner.extend(items); // applied by Redis now
      if (items[0]!.ttlMs === 60_000) await new Promise<void>((go) => (release = go));
      return r;
    },
  });
  const locks = createLocks(backend, { prefix, ttl: 300 }); // renewed every 100 ms
  open.push(locks);
  const lease = await locks.acquire('x');
  const ext = lease.extend(60_000);
  while (!release) await sleep(1);
  await sleep(250); // two renewal intervals with the reply out
  (release as () => void)();
  await ext;
  expect(sent.filter((t) => t === 300)).toEqual([]);
  await sleep(400); // past what a 300 ms renewal would have left in Redis
  const info = await locks.inspect('x');
  expect(info?.fence).toBe(lease.fence);
  expect(lease.held).toBe(true);
  expect(lease.remaining()).toBeLessThanOrEqual(info!.remainingMs);
  expect(lease.remaining()).toBeGreaterThan(55_000);
});

test('an extend() to a shorter ttl whose reply is late: the lease is lost when Redis drops the key, never held by two', async () => {
  const inner = redis(await clients.make('ioredis'));
  let release: (() => void) | null = null;
  const backend: Backend = Object.assign(Object.create(inner) as Backend, {
    extend: async (items: readonly ExtendItem[]) => {
      const r = await inner.extend(items); // applied by Redis now
      if (items[0]!.ttlMs === 150) await new Promise<void>((go) => (release = go));
      return r;
    },
  });
  const locks = createLocks(backend, { prefix, ttl: '10s', opTimeout: '5s' });
  const other = createLocks(redis(await clients.make('ioredis')), { prefix, ttl: '10s' });
  open.push(locks, other);
  const lease = await locks.acquire('short');
  const ext = lease.extend(150).catch((e: unknown) => e);
  expect(lease.remaining()).toBeLessThanOrEqual(150);
  const second = await other.acquire('short', { wait: '2s' }); // once Redis dropped it
  expect(lease.held).toBe(false);
  expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
  (release as (() => void) | null)?.();
  expect(await ext).toBeInstanceOf(LeaseLostError);
  await second.release();
});
