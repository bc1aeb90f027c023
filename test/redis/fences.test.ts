/**
 * Issue #10.2 on real servers: fences stay above every earlier one when Redis restarts without
 * its data (the counter is seeded from the server's TIME in µs), a counter ahead of the clock
 * (a clock stepped back) keeps counting up, and the counters of idle keys expire.
 * The restarted server is this file's own (a free port, no persistence).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, test } from 'vitest';
import { redis, redisKeys } from '../../src/backends/redis/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { freePort, RedisServer } from '../faults/servers.js';
import { Clients, type ClientKind } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-fence-${randomUUID().slice(0, 8)}`;
const servers: RedisServer[] = [];
afterAll(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await clients.closeAll();
  await Promise.allSettled(servers.map((s) => s.destroy()));
});

async function locksOn(kind: ClientKind, url?: string, opts = {}, locksOpts = {}) {
  const c = await clients.make(kind, url);
  if (kind === 'ioredis') c.on('error', () => {}); // the test kills its server under it
  const l = createLocks(redis(c, opts), { prefix, ...locksOpts });
  open.push(l);
  return l;
}

async function until(f: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await f()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

describe.each(['ioredis', 'node-redis'] as ClientKind[])('fences on %s', (kind) => {
  test('a Redis restarted empty issues fences above every earlier one', async () => {
    const server = new RedisServer(await freePort());
    servers.push(server);
    await server.start();
    const url = `redis://127.0.0.1:${server.port}`;
    const before = await locksOn(kind, url);
    const seen: bigint[] = [];
    for (let i = 0; i < 20; i++) {
      const lease = await before.acquire('restart');
      seen.push(lease.fence);
      await lease.release();
    }
    const held = await before.acquire('restart'); // held when the server dies
    seen.push(held.fence);
    for (let i = 1; i < seen.length; i++) expect(seen[i]! > seen[i - 1]!).toBe(true);
    await server.kill();
    server.wipe();
    await server.start();
    const probe = new Redis(url, { lazyConnect: true });
    await probe.connect();
    expect(await probe.dbsize()).toBe(0); // empty: locks and counters are gone
    probe.disconnect();
    const after = await locksOn(kind, url);
    const top = seen.at(-1)!;
    for (let i = 0; i < 5; i++) {
      const lease = await after.acquire('restart', { wait: '5s' });
      expect(lease.fence > top).toBe(true);
      expect(lease.fence > (seen.at(-1) ?? 0n)).toBe(true);
      seen.push(lease.fence);
      await lease.release();
    }
  }, 30_000);

  test('a counter ahead of the clock (a clock stepped back) keeps counting up', async () => {
    const locks = await locksOn(kind);
    const k = `stepped-${kind}`;
    const ahead = BigInt(Date.now()) * 1000n + 3_600_000_000_000n; // the clock as if set back 1000 h
    await (await clients.make('ioredis')).set(redisKeys(`${prefix}:${k}`).fence, ahead.toString());
    const a = await locks.acquire(k);
    expect(a.fence).toBe(ahead + 1n);
    await a.release();
    const b = await locks.acquire(k);
    expect(b.fence).toBe(ahead + 2n);
    await b.release();
  });

  test('the counter of an idle key expires; the next fence is still higher', async () => {
    const locks = await locksOn(kind, undefined, { fenceIdle: '1s' }, { ttl: '300ms', renew: false });
    const admin = await clients.make('ioredis');
    const k = `idle-${kind}`;
    const fenceKey = redisKeys(`${prefix}:${k}`).fence;
    const first = await locks.acquire(k);
    await first.release();
    const pttl = await admin.pttl(fenceKey);
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(1000);
    expect(await until(async () => (await admin.exists(fenceKey)) === 0, 5000)).toBe(true);
    const next = await locks.acquire(k);
    expect(next.fence > first.fence).toBe(true);
    await next.release();
  });

  test('a held lock keeps its counter alive (renewal refreshes it); inspect shows the fence', async () => {
    const locks = await locksOn(kind, undefined, { fenceIdle: '1s' });
    const admin = await clients.make('ioredis');
    const k = `held-${kind}`;
    const lease = await locks.acquire(k, { ttl: '3s' });
    expect(await admin.pttl(redisKeys(`${prefix}:${k}`).fence)).toBeGreaterThan(2000);
    await lease.extend('4s');
    expect(await admin.pttl(redisKeys(`${prefix}:${k}`).fence)).toBeGreaterThan(3000);
    expect((await locks.inspect(k))!.fence).toBe(lease.fence);
    await lease.release();
  });
});
