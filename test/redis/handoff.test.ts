/**
 * Issue #16 on the real server: a release hands the lock to the head of the queue and wakes that
 * waiter's backend with one message, nobody else's; a head that died holds a claim only briefly;
 * a hand-over whose message was lost is still confirmed within the waiter's refresh bound.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import type { RedisAdapter } from '../../src/backends/redis/client.js';
import { redis, redisKeys, type RedisBackend } from '../../src/backends/redis/index.js';
import { Wakeups } from '../../src/backends/redis/wakeups.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Clients, REDIS_URL, type ClientKind } from '../support/redis.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));
const clients = new Clients();
const open: Locks[] = [];
const kids: ChildProcess[] = [];
const prefix = `lh-hand-${randomUUID().slice(0, 8)}`;
afterEach(async () => {
  for (const k of kids.splice(0)) if (k.exitCode === null) k.kill('SIGKILL');
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

/** A Locks on its own client and backend; `messages` counts what its backend's channel got. */
async function instance(kind: ClientKind, opts = {}, client?: unknown) {
  const backend = redis(client ?? (await clients.make(kind))) as RedisBackend;
  /** messages: received on its channel; runs: round trips it sent; runsAtMessage: runs when the last message came */
  const counted = { messages: 0, drop: 0, runs: 0, runsAtMessage: -1 };
  const subscribe = backend.adapter.subscribe.bind(backend.adapter);
  backend.adapter.subscribe = (channel, listener) =>
    subscribe(channel, (ch, message) => {
      if (counted.drop > 0) {
        counted.drop--; // lost on the way
        return;
      }
      counted.messages++;
      counted.runsAtMessage = counted.runs;
      listener(ch, message);
    });
  const run = backend.adapter.run.bind(backend.adapter);
  backend.adapter.run = (calls) => {
    counted.runs++;
    return run(calls);
  };
  const locks = createLocks(backend, { prefix, ...opts });
  open.push(locks);
  /** Calls of this backend now asleep in a wait (pushed or bounded). */
  const sleeping = () =>
    (backend as unknown as { wakeups: { waits: { waiters: Map<string, Set<unknown>> } } }).wakeups.waits.waiters.size;
  return { locks, counted, sleeping, backend };
}

async function until(f: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await f()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

async function queueLength(key: string): Promise<number> {
  return (await clients.make('ioredis')).zcard(redisKeys(`${prefix}:${key}`).q);
}

describe.each(['ioredis', 'node-redis'] as ClientKind[])('hand-over on %s', (kind) => {
  test('one message per hand-over, to the next waiter only', async () => {
    const key = `one-message-${kind}`;
    const n = 4;
    const per = 25;
    const xs = await Promise.all(Array.from({ length: n }, () => instance(kind, { ttl: '10s' })));
    const grants = new Array<number>(n).fill(0);
    let last = -1;
    let switches = 0;
    await Promise.all(
      xs.map(async ({ locks }, i) => {
        for (let j = 0; j < per; j++) {
          const lease = await locks.acquire(key, { wait: '30s' });
          grants[i]!++;
          if (last !== -1 && last !== i) switches++;
          last = i;
          await new Promise((r) => setTimeout(r, 2));
          await lease.release();
        }
      }),
    );
    const messages = xs.map((x) => x.counted.messages);
    console.log(`[handoff] ${kind}: grants ${grants.join('/')}, messages ${messages.join('/')}, switches ${switches}`);
    // a message goes only to the waiter the lock was handed to, and each hand-over is one grant
    for (let i = 0; i < n; i++) expect(messages[i]).toBeLessThanOrEqual(grants[i]!);
    const total = messages.reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThanOrEqual((n * per) / 2); // most grants were hand-overs
    expect(total).toBeLessThanOrEqual(n * per);
  }, 60_000);

  test('waiters refused within the same millisecond are served in the order the server queued them', async () => {
    const key = `same-ms-${kind}`;
    const shared = await clients.make(kind);
    const holder = await instance(kind, { ttl: '10s' });
    for (let round = 0; round < 3; round++) {
      const held = await holder.locks.acquire(key, { wait: '10s' });
      // five backends on one connection: their attempts reach the server in call order, back to back
      const xs = await Promise.all(Array.from({ length: 5 }, () => instance(kind, { ttl: '10s' }, shared)));
      const order: number[] = [];
      const waits = xs.map(({ locks }, i) => locks.withLock(key, () => void order.push(i), { wait: '10s' }));
      for (const w of waits) w.catch(() => {}); // may reject before it is awaited below
      expect(await until(async () => (await queueLength(key)) === 5, 5000)).toBe(true);
      await held.release();
      await Promise.all(waits);
      expect(order).toEqual([0, 1, 2, 3, 4]);
    }
  }, 60_000);

  test('every key of the queue expires, a waiter’s value joining a queue that is already there included', async () => {
    const key = `${prefix}:expiring-${kind}`;
    const [holder, plain, elector] = await Promise.all([0, 1, 2].map(async () => redis(await clients.make(kind))));
    const admin = await clients.make('ioredis');
    try {
      expect(await holder!.acquire(key, { token: 'holder', ttlMs: 30_000 })).not.toBeNull();
      // the first waiter makes the queue (and arms its expiry); the second brings a value, so the
      // values' hash is made while the queue's expiry is still fresh
      expect(await plain!.acquire(key, { token: 'plain', ttlMs: 30_000, queue: true })).toBeNull();
      expect(await elector!.acquire(key, { token: 'elector', ttlMs: 30_000, queue: true, value: 'v' })).toBeNull();
      const k = redisKeys(key);
      for (const name of [k.q, k.qx, k.qv]) expect(Number(await admin.pttl(name)), name).toBeGreaterThan(0);
    } finally {
      await plain!.leave!(key, 'plain');
      await elector!.leave!(key, 'elector');
      await holder!.release(key, 'holder');
      await Promise.all([holder!.close(), plain!.close(), elector!.close()]);
    }
  });

  test('a hand-over is granted on its message, with no round trip; its claim becomes the TTL at the first renewal', async () => {
    const key = `no-confirm-${kind}`;
    const { locks: a } = await instance(kind, { ttl: '10s' });
    const b = await instance(kind, { ttl: '10s' });
    const held = await a.acquire(key);
    const waiting = b.locks.acquire(key, { wait: '20s' });
    waiting.catch(() => {}); // may reject before it is awaited below
    expect(await until(async () => (await queueLength(key)) === 1 && b.sleeping() === 1, 5000)).toBe(true);
    await held.release();
    const lease = await waiting;
    // nothing was sent between the hand-over's message and the grant
    expect(b.counted.messages).toBe(1);
    expect(b.counted.runs).toBe(b.counted.runsAtMessage);
    expect(lease.fence > held.fence).toBe(true);
    expect(await queueLength(key)).toBe(0); // the head left the queue at the hand-over
    // the lease is valid for the claim only (500 ms) until the keeper's first renewal, which
    // comes before half of that has passed and gives lock, lease and fence their TTL
    expect(lease.remaining()).toBeGreaterThan(0);
    expect(lease.remaining()).toBeLessThanOrEqual(500);
    const admin = await clients.make('ioredis');
    const k = redisKeys(`${prefix}:${key}`);
    expect(await until(async () => lease.remaining() > 5000, 2000)).toBe(true);
    expect(Number(await admin.pttl(k.lock))).toBeGreaterThan(5000);
    expect(Number(await admin.pttl(k.fence))).toBeGreaterThan(5000);
    expect(lease.held).toBe(true);
    expect(b.counted.runs).toBe(b.counted.runsAtMessage + 1); // that renewal, and nothing else
    expect(await b.locks.inspect(key)).toMatchObject({ fence: lease.fence });
    await lease.release();
    expect(await admin.exists(k.lock)).toBe(0);
  }, 30_000);

  test("a client's keyPrefix: the hand-over is still granted on its message, with no round trip", async () => {
    const key = `key-prefix-${kind}`;
    const kp = `${prefix}-kp:`;
    const a = await instance(kind, { ttl: '10s' }, await clients.make(kind, REDIS_URL, { keyPrefix: kp }));
    const b = await instance(kind, { ttl: '10s' }, await clients.make(kind, REDIS_URL, { keyPrefix: kp }));
    const held = await a.locks.acquire(key);
    const waiting = b.locks.acquire(key, { wait: '20s' });
    waiting.catch(() => {}); // may reject before it is awaited below
    // queued (its lock key carries the prefix) and asleep: only the message, or its bound, wakes it
    const admin = await clients.make('ioredis');
    const q = `${kp}${redisKeys(`${prefix}:${key}`).q}`;
    expect(await until(async () => (await admin.zcard(q)) === 1 && b.sleeping() === 1, 5000)).toBe(true);
    await held.release();
    const lease = await waiting;
    // the message named the prefixed key: read back without the prefix, it woke the waiter, and
    // nothing was sent between it and the grant
    expect(b.counted.messages).toBe(1);
    expect(b.counted.runs).toBe(b.counted.runsAtMessage);
    expect(lease.fence > held.fence).toBe(true);
    await lease.release();
  }, 30_000);

  test('a hand-over in the millisecond of the refusal is still granted on its message (the server µs decide)', async () => {
    const key = `same-ms-${kind}`;
    const { locks: a } = await instance(kind, { ttl: '10s' });
    const b = await instance(kind, { ttl: '10s' });
    let confirmed = 0;
    // round 0 subscribes b's channel (a first wait may miss a message sent before that)
    for (let i = 0; i <= 20; i++) {
      const held = await a.acquire(key);
      // the release is sent the moment b's refused, queued attempt has its reply: the hand-over
      // follows the refusal by well under a millisecond (with ms times, such a message was not
      // trusted and the waiter confirmed it with a round trip)
      let released: Promise<boolean> | null = null;
      const run = b.backend.adapter.run;
      b.backend.adapter.run = async (calls) => {
        const r = await run(calls);
        released ??= held.release();
        return r;
      };
      const messages = b.counted.messages;
      const lease = await b.locks.acquire(key, { wait: '20s' });
      b.backend.adapter.run = run;
      expect(await released).toBe(true);
      expect(lease.fence > held.fence).toBe(true);
      if (i > 0) {
        expect(b.counted.messages).toBe(messages + 1);
        if (b.counted.runs !== b.counted.runsAtMessage) confirmed++;
      }
      await lease.release();
    }
    expect(confirmed).toBe(0);
  }, 30_000);

  test('a head SIGKILLed before the hand-over delays the next grant by at most the claim plus one refresh', async () => {
    const key = `dead-head-${kind}`;
    const { locks: a } = await instance(kind, { ttl: '30s' });
    const { locks: b } = await instance(kind, { ttl: '30s' });
    const held = await a.acquire(key);
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, 'queue', REDIS_URL, prefix, key, '30000'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    kids.push(child);
    expect(await until(async () => (await queueLength(key)) === 1, 20_000)).toBe(true);
    const waiting = b.acquire(key, { wait: '20s' });
    waiting.catch(() => {}); // may reject before it is awaited below
    expect(await until(async () => (await queueLength(key)) === 2, 5000)).toBe(true);
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
    const releasedAt = performance.now();
    await held.release(); // handed to the dead head: a claim nobody confirms
    const lease = await waiting;
    const delay = performance.now() - releasedAt;
    console.log(`[handoff] ${kind}: dead head, next grant ${Math.round(delay)} ms after the release`);
    expect(delay).toBeLessThanOrEqual(500 + 1000 + 500); // claim + one refresh + slack
    await lease.release();
  }, 40_000);

  test('a waiter whose hand-over message is lost still gets the lock within its refresh bound', async () => {
    const key = `lost-message-${kind}`;
    const { locks: a } = await instance(kind, { ttl: '30s' });
    const b = await instance(kind, { ttl: '30s' });
    const held = await a.acquire(key);
    const waiting = b.locks.acquire(key, { wait: '20s' });
    waiting.catch(() => {}); // may reject before it is awaited below
    // queued, subscribed, and asleep: only the message (or its refresh bound) wakes it
    expect(await until(async () => (await queueLength(key)) === 1 && b.sleeping() === 1, 5000)).toBe(true);
    b.counted.drop = 1;
    const releasedAt = performance.now();
    await held.release();
    const lease = await waiting;
    const delay = performance.now() - releasedAt;
    console.log(`[handoff] ${kind}: message lost, granted ${Math.round(delay)} ms after the release`);
    expect(b.counted.drop).toBe(0); // the message was sent, and dropped
    expect(delay).toBeLessThanOrEqual(1000 + 500); // one refresh interval + slack
    await lease.release();
  }, 30_000);
});

describe('a hand-over message', () => {
  // the message is `<sha1(token)><fence>|u<server µs>|<lock key>`; `take` trusts it only when it
  // follows the waiter's last refused attempt by the server's own clock and names its token
  const sha1 = (t: string) => createHash('sha1').update(t).digest('hex');
  const refusedUs = 1_000_000_000; // the server's µs when it refused (and queued) the attempt
  const setup = () => {
    const w = new Wakeups({} as RedisAdapter, 1000);
    const deliver = (m: string) => (w as unknown as { message(m: string): void }).message(m);
    w.before('{k|x}'); // a call of this backend waits on the key (the key may hold '|')
    w.refused('{k|x}', 0, 0, 1234.5, refusedUs, 'tok');
    return { w, deliver };
  };

  test('after the last refusal, naming our token: the lock is ours from that attempt, with its fence', () => {
    const { w, deliver } = setup();
    deliver(`${sha1('tok')}42|u${refusedUs + 1}|{k|x}`);
    expect(w.take('{k|x}', 'tok')).toEqual({ fence: '42', from: 1234.5 });
    expect(w.take('{k|x}', 'tok')).toBeNull(); // taken once
  });

  test('in the millisecond of the refusal but after it (µs): taken, no confirming round trip', () => {
    const { w, deliver } = setup();
    deliver(`${sha1('tok')}42|u${refusedUs + 400}|{k|x}`); // 0.4 ms later: the same ms
    expect(w.take('{k|x}', 'tok')).toEqual({ fence: '42', from: 1234.5 });
  });

  test('from the same µs as the refusal, or earlier: not trusted (it may predate the refusal)', () => {
    for (const at of [refusedUs, refusedUs - 1, refusedUs - 5_000]) {
      const { w, deliver } = setup();
      deliver(`${sha1('tok')}42|u${at}|{k|x}`);
      expect(w.take('{k|x}', 'tok')).toBeNull();
    }
  });

  test("an older version's message (server ms, no u) is compared in ms", () => {
    const later = setup();
    later.deliver(`${sha1('tok')}42|${refusedUs / 1000 + 1}|{k|x}`);
    expect(later.w.take('{k|x}', 'tok')).toEqual({ fence: '42', from: 1234.5 });
    for (const at of [refusedUs / 1000, refusedUs / 1000 - 1]) {
      const { w, deliver } = setup();
      deliver(`${sha1('tok')}42|${at}|{k|x}`);
      expect(w.take('{k|x}', 'tok')).toBeNull();
    }
  });

  test('naming another token, for a key nobody here waits on, or with no refusal on record: not trusted', () => {
    const a = setup();
    a.deliver(`${sha1('other')}42|u${refusedUs + 1}|{k|x}`);
    expect(a.w.take('{k|x}', 'tok')).toBeNull();
    const b = setup();
    b.deliver(`${sha1('tok')}42|u${refusedUs + 1}|{k|y}`);
    expect(b.w.take('{k|y}', 'tok')).toBeNull();
    const c = setup();
    c.w.forget('{k|x}');
    c.w.before('{k|x}');
    c.deliver(`${sha1('tok')}42|u${refusedUs + 1}|{k|x}`);
    expect(c.w.take('{k|x}', 'tok')).toBeNull();
    // the refusal on record is another token's: a message naming the caller's is not enough
    const d = setup();
    d.deliver(`${sha1('mine')}42|u${refusedUs + 1}|{k|x}`);
    expect(d.w.take('{k|x}', 'mine')).toBeNull();
  });
});

test("dead waiters' values leave the values' hash with their places (a contended key does not pile them up)", async () => {
  const b = redis(await clients.make('ioredis'), { placeTtl: 1000 }) as RedisBackend;
  const key = `${prefix}:qv`;
  const k = redisKeys(key);
  const admin = await clients.make('ioredis');
  const holder = randomUUID();
  expect(await b.acquire(key, { token: holder, ttlMs: 10_000, value: 'h' })).not.toBeNull();
  // 50 candidates with values queue once and die
  for (let i = 0; i < 50; i++)
    expect(await b.acquire(key, { token: randomUUID(), ttlMs: 10_000, queue: true, value: `dead-${i}` })).toBeNull();
  expect(await admin.hlen(k.qv)).toBe(50);
  await new Promise((r) => setTimeout(r, 1100)); // their places lapse
  // a live candidate queues (the queue's keys are refreshed), then the holder releases: the
  // lock goes past the dead to the live one
  const live = randomUUID();
  expect(await b.acquire(key, { token: live, ttlMs: 10_000, queue: true, value: 'live' })).toBeNull();
  expect(await b.release(key, holder)).toBe(true);
  expect(await admin.get(k.lock)).toBe(live);
  expect(await admin.zcard(k.q)).toBe(0);
  expect(await admin.hlen(k.qv)).toBe(0);
  expect(await b.release(key, live)).toBe(true);
  await b.close();
});
