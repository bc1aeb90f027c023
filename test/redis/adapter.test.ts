/**
 * The Redis adapter's fast paths (one script call: no pipeline on ioredis, `sendCommand` on a
 * plain node-redis client) behave as the general path does, on the real server at 6379.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { adapt, redis, redisKeys } from '../../src/backends/redis/index.js';
import { script } from '../../src/backends/redis/client.js';
import { BackendError, createLocks } from '../../src/index.js';
import { eventually } from '../support/freeze.js';
import { Clients, REDIS_URL, type ClientKind } from '../support/redis.js';

const clients = new Clients();
const prefix = `lh-adapter-${randomUUID().slice(0, 8)}`;
afterAll(() => clients.closeAll());

// a script no other test loads: its first call meets NOSCRIPT on a fresh server cache
const ECHO = script(`return { KEYS[1], ARGV[1], ARGV[2], '${randomUUID()}' }`);
const FAIL = script(`return redis.error_reply('ERR leasehold-adapter-test ' .. ARGV[1])`);

describe.each(['ioredis', 'node-redis'] as ClientKind[])('redis adapter on %s', (kind) => {
  test('one call: KEYS and ARGV (numbers as strings) arrive as sent, NOSCRIPT falls back to EVAL', async () => {
    const a = adapt(await clients.make(kind));
    const [r] = await a.run([{ script: ECHO, keys: [`${prefix}:k`], args: ['v', 42] }]);
    expect((r as unknown[]).slice(0, 3)).toEqual([`${prefix}:k`, 'v', '42']);
    const [again] = await a.run([{ script: ECHO, keys: [`${prefix}:k2`], args: ['w', 7] }]);
    expect((again as unknown[]).slice(0, 3)).toEqual([`${prefix}:k2`, 'w', '7']);
  });

  test('a pipeline: only the calls refused with NOSCRIPT are sent again (a call that ran is not run twice)', async () => {
    const c = await clients.make(kind);
    const a = adapt(c);
    const nonce = randomUUID();
    // COUNT is cached on the server; FRESH has never been sent (NOSCRIPT at its first EVALSHA)
    const COUNT = script(`return redis.call('INCR', KEYS[1]) -- ${nonce}`);
    const FRESH = script(`return 'fresh ${nonce}'`);
    await a.run([{ script: COUNT, keys: [`${prefix}:warm-${kind}`], args: [] }]);
    const counter = `${prefix}:count-${kind}-${nonce}`;
    const res = await a.run([
      { script: COUNT, keys: [counter], args: [] },
      { script: FRESH, keys: [counter], args: [] },
    ]);
    expect(res).toEqual([1, `fresh ${nonce}`]);
    const admin = await clients.make('ioredis');
    expect(await admin.get(counter)).toBe('1'); // it ran once
    await admin.del(counter, `${prefix}:warm-${kind}`);
  });

  test('one call: a script error comes back as a BackendError in its slot, not thrown', async () => {
    const a = adapt(await clients.make(kind));
    const [r] = await a.run([{ script: FAIL, keys: [`${prefix}:f`], args: ['boom'] }]);
    expect(r).toBeInstanceOf(BackendError);
    expect((r as Error).message).toContain('leasehold-adapter-test boom');
  });
});

test('node-redis with a keyPrefix: lock keys carry the prefix (the client adds it, as to its own commands)', async () => {
  const kp = `${prefix}-kp:`;
  const c = await clients.make('node-redis', REDIS_URL, { keyPrefix: kp });
  const plain = await clients.make('ioredis');
  const locks = createLocks(redis(c), { prefix });
  try {
    const lease = await locks.acquire('job');
    const lockKey = redisKeys(`${prefix}:job`).lock;
    expect(await plain.get(`${kp}${lockKey}`)).toBe(lease.token);
    expect(await plain.exists(lockKey)).toBe(0);
    expect(await lease.release()).toBe(true);
    expect(await plain.exists(`${kp}${lockKey}`)).toBe(0);
  } finally {
    await locks.close();
  }
});

describe.each(['ioredis', 'node-redis'] as ClientKind[])('a %s client with a keyPrefix', (kind) => {
  test("watchers hear every grant and release (the channel is not a key: the client's prefix is not on it)", async () => {
    const kp = `${prefix}-kpw-${kind}:`;
    const backend = redis(await clients.make(kind, REDIS_URL, { keyPrefix: kp }));
    const locks = createLocks(backend, { prefix });
    let changes = 0;
    const unwatch = await backend.watch!(`${prefix}:w`, () => changes++);
    try {
      const lease = await locks.acquire('w');
      await eventually(() => changes >= 1, 5000, 'the grant is heard');
      await lease.release();
      await eventually(() => changes >= 2, 5000, 'the release is heard');
    } finally {
      unwatch();
      await locks.close();
    }
  });
});

describe.each(['ioredis', 'node-redis'] as ClientKind[])('list() on a %s client with a keyPrefix', (kind) => {
  test('lists the locks held under the prefix, with their keys as given (a glob character in the keyPrefix is literal)', async () => {
    const kp = `${prefix}-kpl*${kind}:`;
    const backend = redis(await clients.make(kind, REDIS_URL, { keyPrefix: kp }));
    const locks = createLocks(backend, { prefix: `${prefix}-l` });
    // the same lock key without the client's prefix (and under a prefix that only matches the glob) is not listed
    const plain = createLocks(redis(await clients.make(kind)), { prefix: `${prefix}-l` });
    const other = createLocks(redis(await clients.make(kind, REDIS_URL, { keyPrefix: `${prefix}-kplX${kind}:` })), {
      prefix: `${prefix}-l`,
    });
    try {
      const a = await locks.acquire('a', { value: 'va' });
      await locks.acquire('b');
      await plain.acquire('c');
      await other.acquire('d');
      const listed = [];
      for await (const i of locks.list()) listed.push(i);
      listed.sort((x, y) => x.key.localeCompare(y.key));
      expect(listed.map((i) => [i.key, i.value])).toEqual([
        ['a', 'va'],
        ['b', undefined],
      ]);
      expect(listed[0]!.fence).toBe(a.fence);
      expect(listed[0]!.remainingMs).toBeGreaterThan(0);
    } finally {
      await Promise.all([locks.close(), plain.close(), other.close()]);
    }
  });
});

describe('ioredis: a lone command leaves at once; commands of a busy tick leave in one write', () => {
  /** Counts the writes that reach the client's socket (each is one syscall). */
  function countWrites(client: any): { writes: number; restore(): void } {
    const stream = client.stream;
    const out = { writes: 0, restore: () => {} };
    const write = stream._write;
    const writev = stream._writev;
    stream._write = function (...a: unknown[]) {
      out.writes++;
      return write.apply(this, a);
    };
    stream._writev = function (...a: unknown[]) {
      out.writes++;
      return writev.apply(this, a);
    };
    out.restore = () => {
      stream._write = write;
      stream._writev = writev;
    };
    return out;
  }

  test('a lone acquire is written at once; 32 acquires at once are two writes, and their 32 releases one', async () => {
    const c = await clients.make('ioredis');
    const locks = createLocks(redis(c), { prefix });
    try {
      await (await locks.acquire('burst-warm')).release(); // connected, scripts loaded
      const counted = countWrites(c);
      try {
        // one command per tick: each leaves at once, before the call returns (no deferral)
        const pending = locks.acquire('burst:lone');
        expect(counted.writes).toBe(1);
        const one = await pending;
        expect(await one.release()).toBe(true);
        expect(counted.writes).toBe(2);
        counted.writes = 0;
        // a burst after a quiet tick: the first at once, the 31 others together on the next tick
        const leases = await Promise.all(Array.from({ length: 32 }, (_, i) => locks.acquire(`burst:${i}`)));
        expect(counted.writes).toBe(2);
        expect(new Set(leases.map((l) => l.fence)).size).toBe(32);
        counted.writes = 0;
        // the last tick sent many: this one is corked from its first command
        expect(await Promise.all(leases.map((l) => l.release()))).toEqual(leases.map(() => true));
        expect(counted.writes).toBe(1);
      } finally {
        counted.restore();
      }
      // every lock is free again: the writes carried every command
      for (let i = 0; i < 32; i++) expect(await c.exists(redisKeys(`${prefix}:burst:${i}`).lock)).toBe(0);
    } finally {
      await locks.close();
    }
  });
});

describe.each([2, 3])('a node-redis client that maps strings to Buffers (RESP%i)', (resp) => {
  test('grants, refuses, inspects, lists and releases as a plain client does', async () => {
    const { createClient, RESP_TYPES } = await import('redis');
    const base = createClient({ url: REDIS_URL, RESP: resp, socket: { reconnectStrategy: false } } as never) as any;
    base.on('error', () => {});
    await base.connect();
    const c = base.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
    const locks = createLocks(redis(c), { prefix: `${prefix}-buf${resp}`, ttl: '5s' });
    try {
      const lease = await locks.tryAcquire('job', { value: 'v1' });
      expect(lease).not.toBeNull(); // granted on the server: the fence came back as a Buffer
      expect(await locks.tryAcquire('job')).toBeNull();
      expect(await locks.inspect('job')).toMatchObject({ fence: lease!.fence, value: 'v1' });
      const listed = [];
      for await (const l of locks.list('')) listed.push(l);
      expect(listed).toMatchObject([{ key: 'job', fence: lease!.fence, value: 'v1' }]);
      expect(await lease!.release()).toBe(true);
      expect(await locks.inspect('job')).toBeNull();
    } finally {
      await locks.close();
      await base.close();
    }
  });
});

test('an ioredis client with stringNumbers (integer replies as strings): a refusal is never read as a grant', async () => {
  const { Redis } = await import('ioredis');
  const c = new Redis(REDIS_URL, { stringNumbers: true, maxRetriesPerRequest: 1 });
  const locks = createLocks(redis(c), { prefix: `${prefix}-sn`, ttl: '5s' });
  try {
    const held = await locks.tryAcquire('job');
    expect(held).not.toBeNull();
    // refused: the holder's pttl comes back as "-4998" (and a lock with no expiry as "0")
    expect(await locks.tryAcquire('job')).toBeNull();
    await c.persist(redisKeys(`${prefix}-sn:job`).lock);
    expect(await locks.tryAcquire('job')).toBeNull();
    expect(await held!.release()).toBe(true);
    const next = await locks.tryAcquire('job');
    expect(next!.fence > held!.fence).toBe(true);
    await next!.release();
  } finally {
    await locks.close();
    c.disconnect();
  }
});
