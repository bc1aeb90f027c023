/**
 * Redis session mode (`redis(client, { session: true })`): what happens around a session key that
 * lapses or is broken while leases hang off it, on the real server. A lapsed session is never
 * revived by an acquire already in flight; locks broken from outside are reported to whichever
 * Locks holds them.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { redis, type RedisBackend } from '../../src/backends/redis/index.js';
import { ACQUIRE } from '../../src/backends/redis/scripts.js';
import { createLocks, LeaseLostError, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-lapse-${randomUUID().slice(0, 8)}`;
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

const lockKey = (key: string) => `{${prefix}:${key}}`;

/** Polls `f` until it returns true or `ms` pass; false on the deadline. */
async function until(f: () => Promise<boolean> | boolean, ms: number, every = 20): Promise<boolean> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await f()) return true;
    await new Promise((r) => setTimeout(r, every));
  }
  return false;
}

function track(l: Locks): Locks {
  open.push(l);
  return l;
}

describe('redis session mode: lapses', () => {
  test('a lapsed session is not revived by an acquire sent before the first reply about it', async () => {
    const b = redis(await clients.make('ioredis'), { session: true }) as RedisBackend;
    // B's acquire reaches the server only when `open()` is called (a slow link): its arguments
    // were fixed when it was sent
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const adapter = b.adapter as { run: RedisBackend['adapter']['run'] };
    const run = adapter.run.bind(adapter);
    adapter.run = async (calls) => {
      const c = calls[0]!;
      if (c.script === ACQUIRE && String(c.keys[0]).endsWith(':B}')) await gate;
      return run(calls);
    };
    const P = track(createLocks(b, { prefix, ttl: 900 }));
    const Q = track(createLocks(redis(await clients.make('ioredis')), { prefix, ttl: 5000 }));
    const pA = P.acquire('A');
    const pB = P.acquire('B'); // the same tick: no reply about the new session yet
    const A = await pA;
    const admin = await clients.make('ioredis');
    const session = (await admin.get(lockKey('A')))!.split('|')[1]!;
    // the session key is lost (an eviction; here a DEL), and another process takes A (free now)
    expect(await admin.del(session)).toBe(1);
    const QA = await Q.tryAcquire('A');
    expect(QA).not.toBeNull();
    open(); // B's acquire arrives now
    const B = await pB;
    // B hangs off a new session; the lapsed one stays dead
    expect((await admin.get(lockKey('B')))!.split('|')[1]).not.toBe(session);
    expect(await admin.exists(session)).toBe(0);
    // so P's lease on A is lost at its next renewal (within the TTL), while Q holds A
    expect(await until(() => !A.held, 900)).toBe(true);
    expect(A.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(QA!.held).toBe(true);
    expect(B.held).toBe(true);
  });

  test('a session whose creating acquire failed is never used again; the waiting acquires start a new one', async () => {
    const b = redis(await clients.make('ioredis'), { session: true }) as RedisBackend;
    const adapter = b.adapter as { run: RedisBackend['adapter']['run'] };
    const run = adapter.run.bind(adapter);
    const sent: { session: string; create: string }[] = [];
    let failFirst = true;
    adapter.run = async (calls) => {
      const c = calls[0]!;
      if (c.script === ACQUIRE) {
        sent.push({ session: String(c.keys[2]), create: String(c.args[9]) });
        if (failFirst) {
          failFirst = false;
          // the command went out; its reply never came back
          await run(calls);
          throw new Error('redis: read ECONNRESET (injected)');
        }
      }
      return run(calls);
    };
    const req = { ttlMs: 900, renew: true } as const;
    const first = b.acquire(`${prefix}:F1`, { ...req, token: randomUUID() });
    const token = randomUUID();
    const second = b.acquire(`${prefix}:F2`, { ...req, token });
    await expect(first).rejects.toThrow(/ECONNRESET/);
    const g = await second;
    expect(g?.session).toBeDefined();
    // one creator per session: the failed one's session is never named again
    expect(sent.map((s) => s.create)).toEqual(['1', '1']);
    expect(sent[1]!.session).not.toBe(sent[0]!.session);
    expect(g!.session).toBe(sent[1]!.session);
    expect(await b.release(`${prefix}:F2`, token)).toBe(true);
    await b.close();
  });

  test('two Locks on one backend share its sessions: a lock broken by forceRelease is reported to the Locks that holds it', async () => {
    const b = redis(await clients.make('ioredis'), { session: true }) as RedisBackend;
    const X = track(createLocks(b, { prefix, ttl: 900 }));
    const Y = track(createLocks(b, { prefix, ttl: 900 }));
    const admin: Backend = redis(await clients.make('ioredis'));
    const x = await X.acquire('shared-x');
    const y = await Y.acquire('shared-y');
    // one session for both (same backend, same TTL)
    const raw = await clients.make('ioredis');
    const sx = (await raw.get(lockKey('shared-x')))!.split('|')[1];
    expect((await raw.get(lockKey('shared-y')))!.split('|')[1]).toBe(sx);
    // the :lost set is read (and emptied) by whichever renewal comes first: here neither X's
    // keeper nor Y's, but a renewal of the shared session from outside both
    expect(await admin.forceRelease!(`${prefix}:shared-y`)).not.toBeNull();
    const [r] = await b.renewSessions!([sx!]);
    expect(r!.ok).toBe(true);
    // Y, which holds the lock, lost it at once; X's lease stands
    expect(y.held).toBe(false);
    expect(y.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(x.held).toBe(true);
    // and the same with the other one, now through the keepers (whichever renews first)
    expect(await admin.forceRelease!(`${prefix}:shared-x`)).not.toBeNull();
    expect(await until(() => !x.held, 900)).toBe(true);
    await admin.close();
  });

  test('a session past its expiry is dropped from the backend once no longer used (one per TTL was kept forever)', async () => {
    const b = redis(await clients.make('ioredis'), { session: true }) as RedisBackend;
    const current = (b as unknown as { sessions: { current: Map<number, unknown> } }).sessions.current;
    const hold = async (ttlMs: number) => {
      const token = randomUUID();
      const key = `${prefix}:ttl-${ttlMs}`;
      expect(await b.acquire(key, { token, ttlMs, renew: true })).not.toBeNull();
      expect(await b.release(key, token)).toBe(true);
    };
    // 100 TTLs (jittered, say) used once each, then never again
    for (let ttl = 50; ttl < 150; ttl++) await hold(ttl);
    expect(current.size).toBeLessThanOrEqual(100); // (some may be dropped already)
    await new Promise((r) => setTimeout(r, 300)); // their sessions' expiries pass
    for (let ttl = 1000; ttl < 1100; ttl++) await hold(ttl);
    expect([...current.keys()].filter((ttl) => ttl < 1000)).toEqual([]);
    expect(current.size).toBe(100);
    await b.close();
  });
});
