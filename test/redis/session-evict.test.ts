/**
 * Redis session mode on a server that may evict keys (docs/redis.md, "Eviction"): the backend
 * says so on `leasehold:warning`, and a lock key found gone at its refresh is lost at once and
 * makes every other lock of its session refreshed at the next renewal. The warning is tested on a
 * redis-server of this file's own (its maxmemory is changed); the rest on the shared server.
 */
import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { adapt, redis, RedisBackend } from '../../src/backends/redis/index.js';
import { REFRESH_MANY } from '../../src/backends/redis/scripts.js';
import { createLocks, type Locks } from '../../src/index.js';
import type { WarningEvent } from '../../src/events.js';
import { RedisServer } from '../faults/servers.js';
import { freePort } from '../support/ports.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-evict-${randomUUID().slice(0, 8)}`;
let server: RedisServer | undefined;
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  await clients.closeAll();
  await server?.stop();
});

const lockKey = (key: string) => `{${prefix}:${key}}`;

describe('redis session mode on an evicting server', () => {
  test('a new session on a server that may evict keys publishes LEASEHOLD_REDIS_EVICTION (not on noeviction)', async () => {
    server = new RedisServer(await freePort());
    await server.start();
    const url = `redis://127.0.0.1:${server.port}`;
    const admin = await clients.make('ioredis', url);
    const warnings: WarningEvent[] = [];
    const listener = (m: unknown) => warnings.push(m as WarningEvent);
    subscribe('leasehold:warning', listener);
    try {
      // noeviction (with a maxmemory): nothing to say
      await admin.config('SET', 'maxmemory', '256mb');
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      const quiet = createLocks(redis(await clients.make('ioredis', url), { session: true }), { prefix });
      open.push(quiet);
      // the check is sent before the acquire's script, on the same connection: answered first
      await (await quiet.acquire('quiet')).release();
      expect(warnings.filter((w) => w.code === 'LEASEHOLD_REDIS_EVICTION')).toEqual([]);
      // allkeys-lru: said once per backend, at its first session
      await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
      for (const kind of ['ioredis', 'node-redis'] as const) {
        warnings.length = 0;
        const loud = createLocks(redis(await clients.make(kind, url), { session: true }), { prefix });
        open.push(loud);
        await (await loud.acquire(`loud-${kind}`)).release();
        await (await loud.acquire(`loud-${kind}`, { ttl: 5000 })).release(); // another TTL: a second session
        const said = () => warnings.filter((w) => w.code === 'LEASEHOLD_REDIS_EVICTION');
        for (let i = 0; i < 100 && said().length === 0; i++) await new Promise((r) => setTimeout(r, 20));
        expect(said()).toHaveLength(1);
        expect(said()[0]!.message).toMatch(/allkeys-lru/);
      }
    } finally {
      unsubscribe('leasehold:warning', listener);
    }
  });

  test('a lock found gone at its refresh is lost at once, and every other lock of its session is refreshed at the next renewal', async () => {
    const c = await clients.make('ioredis');
    // locks' long PX 6 s: a refresh is due two seconds after the grant
    const b = new RedisBackend(adapt(c), {
      lingerMs: 2000,
      placeMs: 3000,
      fenceIdleMs: 86_400_000,
      claimMs: 500,
      session: true,
      lockPxMinMs: 6000,
    });
    const lost: string[] = [];
    b.onLost!((key) => lost.push(key));
    const adapter = b.adapter as { run: RedisBackend['adapter']['run'] };
    const run = adapter.run.bind(adapter);
    const refreshed: string[][] = [];
    adapter.run = async (calls) => {
      for (const call of calls)
        if (call.script === REFRESH_MANY) refreshed.push(call.keys.filter((_, i) => i % 3 === 0));
      return run(calls);
    };
    const req = { ttlMs: 900, renew: true } as const;
    const ga = await b.acquire(`${prefix}:a`, { ...req, token: randomUUID() });
    // renews the session as the engine would (every ttl/3, here more often)
    const tick = async () => {
      await new Promise((r) => setTimeout(r, 100));
      expect(await b.renewSessions!([ga!.session!])).toEqual([{ ok: true, lost: expect.any(Array) }]);
    };
    for (let i = 0; i < 10; i++) await tick();
    const gb = await b.acquire(`${prefix}:b`, { ...req, token: randomUUID() });
    expect(gb!.session).toBe(ga!.session);
    const admin = await clients.make('ioredis');
    // both lock keys evicted (here: deleted)
    expect(await admin.del(lockKey('a'), lockKey('b'))).toBe(2);
    // renew as the engine would (every ttl/3) until a renewal carried a's refresh
    while (refreshed.length === 0) await tick();
    expect(refreshed).toEqual([[lockKey('a')]]);
    expect(lost).toEqual([`${prefix}:a`]); // at once, through onLost
    // b's refresh is not due for another second: it goes now anyway, and b is lost
    await b.renewSessions!([ga!.session!]);
    expect(refreshed[1]).toEqual([lockKey('b')]);
    expect(lost).toEqual([`${prefix}:a`, `${prefix}:b`]);
    await b.close();
  });

  test('a lock key overwritten with another type is that lease lost, not a failed renewal of every lease', async () => {
    const c = await clients.make('ioredis');
    const b = new RedisBackend(adapt(c), {
      lingerMs: 2000,
      placeMs: 3000,
      fenceIdleMs: 86_400_000,
      claimMs: 500,
      session: true,
      lockPxMinMs: 1500, // refresh due half a second after the grant
    });
    const lost: string[] = [];
    b.onLost!((key) => lost.push(key));
    const req = { ttlMs: 900, renew: true } as const;
    const tokens = [randomUUID(), randomUUID()];
    const [g] = await Promise.all(tokens.map((token, i) => b.acquire(`${prefix}:wt-${i}`, { ...req, token })));
    const admin = await clients.make('ioredis');
    await admin.del(lockKey('wt-0'));
    await admin.hset(lockKey('wt-0'), 'x', '1'); // someone else's write, of another type
    // renew as the engine would until both refreshes went (each renewal resolves)
    const t0 = performance.now();
    while (lost.length === 0 && performance.now() - t0 < 3000) {
      await new Promise((r) => setTimeout(r, 100));
      expect(await b.renewSessions!([g!.session!])).toEqual([{ ok: true, lost: expect.any(Array) }]);
    }
    expect(lost).toEqual([`${prefix}:wt-0`]);
    // the other lease stands: its lock refreshed, its session renewed
    expect(await admin.get(lockKey('wt-1'))).toMatch(new RegExp(`^${tokens[1]}\\|`));
    expect(b.validUntil!(`${prefix}:wt-1`, tokens[1]!)).toBeGreaterThan(performance.now());
    await admin.del(lockKey('wt-0'));
    await b.close();
  });
});
