/**
 * The etcd driver frees a lock that was neither extended nor released within its TTL (the lock
 * lives under the backend's longer etcd lease, so the server would not free it by then), and says
 * so through `onLost`: a lease the engine somehow still held is then lost, never held on.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, expect, test } from 'vitest';
import { etcd } from '../../src/backends/etcd/index.js';
import { BackendError } from '../../src/index.js';
import { EtcdClients } from '../support/etcd.js';

const clients = new EtcdClients();
afterAll(() => clients.closeAll());

const token = () => randomBytes(16).toString('base64url');

test('a lock neither extended nor released within its TTL is freed and reported through onLost', async () => {
  const [a, b] = [etcd(await clients.make()), etcd(await clients.make())];
  const key = `lh-expiry-${Date.now()}:k`;
  const lost: { key: string; token: string; cause: unknown; at: number }[] = [];
  a.onLost!((k, t, cause) => lost.push({ key: k, token: t, cause, at: performance.now() }));
  try {
    const mine = token();
    const t0 = performance.now();
    const g = await a.acquire(key, { token: mine, ttlMs: 300, queue: false });
    expect(g).not.toBeNull();
    // another backend cannot take it while it is held
    expect(await b.acquire(key, { token: token(), ttlMs: 300, queue: false })).toBeNull();
    await expect.poll(() => lost.length, { timeout: 3000, interval: 20 }).toBe(1);
    expect(lost[0]!.key).toBe(key);
    expect(lost[0]!.token).toBe(mine);
    expect(lost[0]!.cause).toBeInstanceOf(BackendError);
    expect(String((lost[0]!.cause as Error).message)).toMatch(/neither extended nor released within its TTL/);
    expect(lost[0]!.at - t0).toBeGreaterThanOrEqual(300);
    // freed on the server too: the other backend gets it, with a higher fence
    const other = token();
    let g2 = null;
    for (let i = 0; i < 50 && !g2; i++) {
      g2 = await b.acquire(key, { token: other, ttlMs: 1000, queue: false });
      if (!g2) await new Promise((r) => setTimeout(r, 20));
    }
    expect(g2).not.toBeNull();
    expect(g2!.fence).toBeGreaterThan(g!.fence);
    expect(await a.release(key, mine)).toBe(false); // no longer ours
    expect(await b.release(key, other)).toBe(true);
  } finally {
    await a.close();
    await b.close();
  }
});

test('a lock released or extended in time is not reported lost', async () => {
  const a = etcd(await clients.make());
  const key = `lh-expiry-${Date.now()}:k2`;
  const lost: string[] = [];
  a.onLost!((_k, t) => lost.push(t));
  try {
    const [x, y] = [token(), token()];
    expect(await a.acquire(key, { token: x, ttlMs: 300, queue: false })).not.toBeNull();
    expect(await a.release(key, x)).toBe(true);
    expect(await a.acquire(`${key}b`, { token: y, ttlMs: 300, queue: false })).not.toBeNull();
    for (let i = 0; i < 4; i++) {
      await new Promise((r) => setTimeout(r, 150));
      expect(await a.extend([{ key: `${key}b`, token: y, ttlMs: 300 }])).toEqual([true]);
    }
    expect(lost).toEqual([]);
    expect(await a.release(`${key}b`, y)).toBe(true);
  } finally {
    await a.close();
  }
});
