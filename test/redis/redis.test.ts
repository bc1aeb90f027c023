/** Redis-specific behaviour, against the real server on 127.0.0.1:6379. */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { redis, redisKeys } from '../../src/backends/redis/index.js';
import { createLocks, InvalidArgumentError, type Locks } from '../../src/index.js';
import { RedisServer } from '../faults/servers.js';
import { freePort } from '../support/ports.js';
import { Clients, type ClientKind } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-redis-${randomUUID().slice(0, 8)}`;
let admin: any;
const adminClient = async () => (admin ??= await clients.make('ioredis'));
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  await clients.closeAll();
  await own?.server.kill();
});

async function locksOn(kind: ClientKind, opts = {}) {
  const l = createLocks(redis(await clients.make(kind)), { prefix, ...opts });
  open.push(l);
  return l;
}

/** A redis-server of this file's own: its command counters count only what a test sends. */
let own: { server: RedisServer; url: string; admin: any } | undefined;
async function ownServer() {
  if (!own) {
    const server = new RedisServer(await freePort());
    await server.start();
    const url = `redis://127.0.0.1:${server.port}`;
    own = { server, url, admin: await clients.make('ioredis', url) };
  }
  return own;
}

async function commandCalls(): Promise<Record<string, number>> {
  const info: string = await (await ownServer()).admin.info('commandstats');
  const out: Record<string, number> = {};
  for (const m of info.matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

describe.each(['ioredis', 'node-redis'] as ClientKind[])('redis backend on %s', (kind) => {
  test('an uncontended acquire + release is two commands: two round trips', async () => {
    // counted on a server of its own: the shared one's counters move with whatever else runs
    const { url } = await ownServer();
    const locks = createLocks(redis(await clients.make(kind, url)), { prefix });
    open.push(locks);
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

  test('one renewal of leases of mixed TTLs gives each its own expiry and its own result, in order', async () => {
    const b = redis(await clients.make(kind));
    const admin = await adminClient();
    const keys = Array.from({ length: 7 }, (_, i) => `${prefix}:mix-${kind}-${i}`);
    const tokens = keys.map(() => randomUUID());
    try {
      for (let i = 0; i < keys.length; i++) {
        expect(await b.acquire(keys[i]!, { token: tokens[i]!, ttlMs: 60_000, value: `v${i}` })).not.toBeNull();
      }
      // lease 3 was taken over meanwhile, lease 5 deleted: both must come back false, in their places
      await admin.set(`{${keys[3]}}`, 'someone-else', 'PX', 60_000);
      await admin.del(`{${keys[5]}}`);
      const ttl = (i: number) => [2_000, 20_000, 40_000][i % 3]!;
      const ok = await b.extend(keys.map((key, i) => ({ key, token: tokens[i]!, ttlMs: ttl(i) })));
      expect(ok).toEqual([true, true, true, false, true, false, true]);
      for (const i of [0, 1, 2, 4, 6]) {
        for (const suffix of ['', ':v']) {
          const left = Number(await admin.pttl(`{${keys[i]}}${suffix}`));
          expect(left).toBeLessThanOrEqual(ttl(i));
          expect(left).toBeGreaterThan(ttl(i) - 1_500);
        }
        // the fence counter outlives the lock (fenceIdle, 24 h by default)
        expect(Number(await admin.pttl(`{${keys[i]}}:fence`))).toBeGreaterThan(3_600_000);
      }
      // the taken-over lock is not touched
      expect(await admin.get(`{${keys[3]}}`)).toBe('someone-else');
      expect(Number(await admin.pttl(`{${keys[3]}}`))).toBeGreaterThan(50_000);
    } finally {
      await b.close();
      await admin.del(...keys.flatMap((k) => [`{${k}}`, `{${k}}:v`, `{${k}}:fence`]));
    }
  });

  test('a flushed script cache (NOSCRIPT) falls back to EVAL and keeps working', async () => {
    const locks = await locksOn(kind);
    await (await adminClient()).script('FLUSH');
    const lease = await locks.acquire(`noscript-${kind}`);
    expect(lease.fence).toBeGreaterThan(0n);
    expect(await lease.release()).toBe(true);
  });

  test('waiters on many keys share one subscriber connection', async () => {
    // on a server of its own: the shared one's pub/sub clients come and go with other test files
    const { url, admin } = await ownServer();
    const on = async () => {
      const l = createLocks(redis(await clients.make(kind, url)), { prefix });
      open.push(l);
      return l;
    };
    const subscribers = async () =>
      String(await admin.client('LIST', 'TYPE', 'pubsub'))
        .split('\n')
        .filter((l) => l.trim()).length;
    const [a, b] = [await on(), await on()];
    const keys = Array.from({ length: 12 }, (_, i) => `sub-${kind}-${i}`);
    const held = await Promise.all(keys.map((k) => a.acquire(k)));
    const before = await subscribers();
    const waiting = keys.map((k) => b.acquire(k, { wait: '10s' }));
    for (const w of waiting) w.catch(() => {}); // may reject before it is awaited below
    // every waiter has been refused and queued, and the wake-up subscription is up
    const queued = async () => {
      let n = 0;
      for (const k of keys) n += Number(await admin.exists(redisKeys(`${prefix}:${k}`).q));
      return n;
    };
    while ((await queued()) < keys.length || (await subscribers()) === before) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect((await subscribers()) - before).toBe(1);
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

  test('a waiter that died in the queue blocks the next one for at most its place bound', async () => {
    const k = `dead-waiter-${kind}`;
    const full = `${prefix}:${k}`;
    const holder = await locksOn(kind);
    const lease = await holder.acquire(k);
    // a process queues for the lock, then dies: its place expires after placeTtl (700ms), not its ttl
    const ghost = redis(await clients.make(kind), { placeTtl: 700 });
    expect(await ghost.acquire(full, { token: 'ghost-token-00000000000', ttlMs: 60_000, queue: true })).toBeNull();
    await ghost.close();
    const queuedAt = performance.now();
    const next = await locksOn(kind);
    const waiting = next.acquire(k, { wait: '10s', ttl: '3s' });
    waiting.catch(() => {}); // may reject before it is awaited below
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

test('200 dead waiters: once their places lapsed, the free lock goes to the caller, never to one of them', async () => {
  const c = await adminClient();
  // dead waiters (their process died: nobody leaves the queue), places bounded by placeTtl 300ms
  const queueDead = async (full: string) => {
    const ghost = redis(await clients.make('ioredis'), { placeTtl: 300 });
    for (let i = 0; i < 200; i++) {
      const token = `ghost-${String(i).padStart(4, '0')}-0000000000000`;
      expect(await ghost.acquire(full, { token, ttlMs: 60_000, queue: true })).toBeNull();
    }
    await ghost.close();
    expect(await c.zcard(redisKeys(full).q)).toBe(200);
  };
  const locks = await locksOn('ioredis');
  // a release hands the lock on to the first live waiter: there is none
  const lease = await locks.acquire('dead-200-release');
  const full1 = `${prefix}:dead-200-release`;
  await queueDead(full1);
  await new Promise((r) => setTimeout(r, 400)); // every place (300ms) lapsed
  expect(await lease.release()).toBe(true);
  expect(await c.get(redisKeys(full1).lock)).toBeNull();
  expect(await c.exists(redisKeys(full1).q)).toBe(0);
  // a free lock behind 200 lapsed places is tryAcquire's
  const holder = await locks.acquire('dead-200-try');
  const full2 = `${prefix}:dead-200-try`;
  await queueDead(full2);
  await new Promise((r) => setTimeout(r, 400)); // every place (300ms) lapsed
  await c.del(redisKeys(full2).lock); // the holder's lease ends without a hand-over (expired)
  const got = await locks.tryAcquire('dead-200-try');
  expect(got).not.toBeNull();
  expect(await c.exists(redisKeys(full2).q)).toBe(0);
  expect(await got!.release()).toBe(true);
  expect(await holder.release()).toBe(false);
});

test('redis() rejects what is not a Redis client, and unknown options', () => {
  // a compile error in TypeScript; a JavaScript caller gets the runtime check
  expect(() => redis({} as never)).toThrow(InvalidArgumentError);
  expect(() => redis(null as never)).toThrow(InvalidArgumentError);
  expect(() => redis(admin ?? {}, { nope: 1 } as never)).toThrow(InvalidArgumentError);
  expect(() => redis(admin ?? {}, { placeTtl: 10 })).toThrow(InvalidArgumentError);
});

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
      expect(await (await adminClient()).get(`leasehold-resource:{${key}}`)).toBe('v100');
      await expect(fencedSet(c, '', 'x', 1n)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(fencedSet(c, key, 'x', 1 as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      // a fence record someone else overwrote: a clear LeaseholdError (before, a raw SyntaxError
      // from BigInt), and nothing written
      await (await adminClient()).set(`leasehold-resource:{${key}}:fence-seen`, 'abc');
      const bad = await fencedSet(c, key, 'x', 5n).catch((e: unknown) => e);
      expect(bad).toMatchObject({
        code: 'LEASEHOLD_BACKEND',
        message: expect.stringMatching(/holds "abc", not a fence; nothing was written/),
      });
      expect(await (await adminClient()).get(`leasehold-resource:{${key}}`)).toBe('v100');
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
