/** Redis-specific behaviour, against the real server on 127.0.0.1:6379. */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { redis, redisKeys } from '../../src/backends/redis/index.js';
import { createLocks, InvalidArgumentError, type Locks } from '../../src/index.js';
import { Clients, type ClientKind } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-redis-${randomUUID().slice(0, 8)}`;
let admin: any;
const adminClient = async () => (admin ??= await clients.make('ioredis'));
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

async function locksOn(kind: ClientKind, opts = {}) {
  const l = createLocks(redis(await clients.make(kind)), { prefix, ...opts });
  open.push(l);
  return l;
}

async function commandCalls(): Promise<Record<string, number>> {
  const info: string = await (await adminClient()).info('commandstats');
  const out: Record<string, number> = {};
  for (const m of info.matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

describe.each(['ioredis', 'node-redis'] as ClientKind[])('redis backend on %s', (kind) => {
  test('an uncontended acquire + release is two commands: two round trips', async () => {
    const locks = await locksOn(kind);
    await (await locks.acquire('warm')).release(); // scripts now cached
    const before = await commandCalls();
    const lease = await locks.acquire(`rt-${kind}`);
    await lease.release();
    const after = await commandCalls();
    const delta = Object.fromEntries(
      Object.entries(after)
        .map(([k, v]) => [k, v - (before[k] ?? 0)] as const)
        .filter(([k, v]) => v > 0 && k !== 'info'),
    );
    // two script calls from the client; everything else counted ran inside those scripts
    expect(delta.evalsha).toBe(2);
    const insideScripts = [
      'time',
      'zrangebyscore',
      'zrem',
      'exists',
      'zrange',
      'set',
      'incr',
      'get',
      'del',
      'publish',
      'pttl',
    ];
    expect(Object.keys(delta).filter((c) => c !== 'evalsha' && !insideScripts.includes(c))).toEqual([]);
  });

  test('a flushed script cache (NOSCRIPT) falls back to EVAL and keeps working', async () => {
    const locks = await locksOn(kind);
    await (await adminClient()).script('FLUSH');
    const lease = await locks.acquire(`noscript-${kind}`);
    expect(lease.fence).toBeGreaterThan(0n);
    expect(await lease.release()).toBe(true);
  });

  test('waiters on many keys share one subscriber connection', async () => {
    const a = await locksOn(kind);
    const b = await locksOn(kind);
    const keys = Array.from({ length: 12 }, (_, i) => `sub-${kind}-${i}`);
    const held = await Promise.all(keys.map((k) => a.acquire(k)));
    const pubsubBefore = await pubsubClients();
    const waiting = keys.map((k) => b.acquire(k, { wait: '10s' }));
    // every waiter has been refused once and is now waiting on push
    await new Promise((r) => setTimeout(r, 200));
    expect((await pubsubClients()) - pubsubBefore).toBe(1);
    await Promise.all(held.map((l) => l.release()));
    const got = await Promise.all(waiting);
    expect(got.every((l) => l.held)).toBe(true);
  });

  test('keys with braces, colons and non-ASCII characters stay in one slot and work', async () => {
    const locks = await locksOn(kind);
    for (const k of ['a}b{c', '{already-tagged}', 'ключ:42', 'x'.repeat(1024)]) {
      const lease = await locks.acquire(k);
      const keys = redisKeys(`${prefix}:${k}`);
      const c = await adminClient();
      expect(await c.get(keys.lock)).toBe(lease.token);
      expect(await c.get(keys.fence)).toBe(String(lease.fence));
      expect(await lease.release()).toBe(true);
      expect(await c.exists(keys.lock)).toBe(0);
    }
  });

  test('a waiter that died in the queue blocks the next one for at most its TTL', async () => {
    const k = `dead-waiter-${kind}`;
    const full = `${prefix}:${k}`;
    const holder = await locksOn(kind);
    const lease = await holder.acquire(k);
    // a process queues for the lock, then dies: its place expires after its ttl (700ms)
    const ghost = redis(await clients.make(kind));
    expect(await ghost.acquire(full, { token: 'ghost-token-00000000000', ttlMs: 700, queue: true })).toBeNull();
    await ghost.close();
    const queuedAt = performance.now();
    const next = await locksOn(kind);
    const waiting = next.acquire(k, { wait: '10s', ttl: '3s' });
    await lease.release();
    const got = await waiting;
    const took = performance.now() - queuedAt;
    expect(got.held).toBe(true);
    expect(took).toBeLessThan(700 + 1000 /* our bounded re-check */ + 300);
    // the queue keys are gone once the queue is empty
    const c = await adminClient();
    expect(await c.exists(redisKeys(full).q, redisKeys(full).qx)).toBe(0);
  });
});

test('redis() rejects what is not a Redis client, and unknown options', () => {
  expect(() => redis({})).toThrow(InvalidArgumentError);
  expect(() => redis(null)).toThrow(InvalidArgumentError);
  expect(() => redis(admin ?? {}, { nope: 1 } as never)).toThrow(InvalidArgumentError);
});

async function pubsubClients(): Promise<number> {
  const list: string = await (await adminClient()).client('LIST', 'TYPE', 'pubsub');
  return list.split('\n').filter((l) => l.trim()).length;
}

describe('fencedSet', () => {
  test.each(['ioredis', 'node-redis'] as ClientKind[])(
    'rejects a lower fence, accepts equal and higher (%s)',
    async (kind) => {
      const { fencedSet } = await import('../../src/backends/redis/index.js');
      const { StaleFenceError } = await import('../../src/index.js');
      const c = await clients.make(kind);
      const key = `${prefix}:resource:${kind}`;
      await fencedSet(c, key, 'v9', 9n);
      await fencedSet(c, key, 'v9-again', 9n);
      await fencedSet(c, key, 'v10', 10n);
      const err = await fencedSet(c, key, 'stale', 8n).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StaleFenceError);
      expect((err as InstanceType<typeof StaleFenceError>).highest).toBe(10n);
      // numeric, not lexical, comparison: 100 > 99
      await fencedSet(c, key, 'v99', 99n);
      await fencedSet(c, key, 'v100', 100n);
      await expect(fencedSet(c, key, 'stale', 99n)).rejects.toBeInstanceOf(StaleFenceError);
      expect(await (await adminClient()).get(`{${key}}`)).toBe('v100');
      await expect(fencedSet(c, '', 'x', 1n)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(fencedSet(c, key, 'x', 1 as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    },
  );
});

test.each(['ioredis', 'node-redis'] as ClientKind[])('fences stay exact past 2^53 (%s)', async (kind) => {
  const locks = await locksOn(kind);
  const k = `big-fence-${kind}`;
  await (await adminClient()).set(redisKeys(`${prefix}:${k}`).fence, '9007199254740993');
  const lease = await locks.acquire(k);
  expect(lease.fence).toBe(9007199254740994n);
  expect((await locks.inspect(k))!.fence).toBe(9007199254740994n);
  await lease.release();
});
