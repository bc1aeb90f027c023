/**
 * idempotent never runs a side effect twice because its result could not be stored (issue #9.6),
 * and a stored result comes back as it went in (bigint, Date, ...). On real Redis and on memory.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { redis, redisKeys } from '../../src/backends/redis/index.js';
import { createLocks, InvalidArgumentError, UnserializableError, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
const store = new MemoryStore();
const open: Locks[] = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

const TARGETS: Record<string, () => Promise<Backend>> = {
  redis: async () => redis(await clients.make('ioredis')),
  memory: async () => memory({ store }), // one store: several processes on one server
};

describe.each(Object.keys(TARGETS))('idempotent on %s', (name) => {
  const prefix = `idem-${randomUUID().slice(0, 8)}`;
  const locks = async () => {
    const l = createLocks(await TARGETS[name]!(), { prefix });
    open.push(l);
    return l;
  };

  test('a BigInt and a Date come back as they went in; fn ran once', async () => {
    const l = await locks();
    let runs = 0;
    const charge = () => {
      runs++;
      return { id: 9007199254740993n, at: new Date('2026-11-30T10:00:00Z'), tags: new Set(['a']) };
    };
    const first = await l.idempotent('charge', charge);
    const again = await l.idempotent('charge', charge);
    expect(runs).toBe(1);
    expect(again).toStrictEqual(first);
    expect(again.id).toBe(9007199254740993n);
    expect(again.at).toBeInstanceOf(Date);
  });

  test('a result that cannot be stored: fn ran once, and never runs again while the record lasts', async () => {
    const l = await locks();
    let runs = 0;
    const charge = () => {
      runs++;
      return { receipt: 'r-1', refund: () => 'not data' };
    };
    const first = await l.idempotent('unstorable', charge).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(UnserializableError);
    expect(first).toMatchObject({ code: 'LEASEHOLD_UNSERIALIZABLE' });
    expect(String((first as Error).message)).toMatch(/ran, but its result cannot be stored.*function/);
    for (let i = 0; i < 3; i++) {
      await expect(l.idempotent('unstorable', charge)).rejects.toBeInstanceOf(UnserializableError);
    }
    const other = await locks(); // another process
    await expect(other.idempotent('unstorable', charge)).rejects.toMatchObject({ code: 'LEASEHOLD_UNSERIALIZABLE' });
    expect(runs).toBe(1);
  });

  test('a result whose toJSON gives nothing is refused on the first call too, not only on repeats', async () => {
    const l = await locks();
    let runs = 0;
    // JSON.stringify of it is undefined: the record would be `{"v":undefined}`, not JSON
    const charge = () => (runs++, { receipt: 'r-2', toJSON: () => undefined });
    const first = await l.idempotent('nothing', charge).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(UnserializableError);
    await expect(l.idempotent('nothing', charge)).rejects.toThrow(/already ran, but its result could not be stored/);
    expect(runs).toBe(1);
  });

  test('the lock is renewed while fn runs on Locks whose default is renew: false: fn runs once', async () => {
    const mk = async () => {
      const l = createLocks(await TARGETS[name]!(), { prefix, ttl: 600, renew: false });
      open.push(l);
      return l;
    };
    const [a, b] = [await mk(), await mk()];
    let runs = 0;
    const slow = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 1500)); // two and a half ttls: a lock that is not renewed expires
      return 'charged';
    };
    const first = a.idempotent('slow', slow);
    await new Promise((r) => setTimeout(r, 50));
    const second = b.idempotent('slow', slow); // waits for the run in progress
    expect(await Promise.all([first, second])).toEqual(['charged', 'charged']);
    expect(runs).toBe(1);
  });

  test('custom serialize/deserialize are used both ways; a throwing serialize also stores the marker', async () => {
    const l = await locks();
    class Money {
      constructor(readonly cents: bigint) {}
    }
    const opts = {
      serialize: (v: unknown) => `money:${(v as Money).cents}`,
      deserialize: (s: string) => new Money(BigInt(s.slice('money:'.length))),
    };
    let runs = 0;
    const pay = () => (runs++, new Money(1999n));
    await l.idempotent('money', pay, opts);
    const back = await l.idempotent('money', pay, opts);
    expect(back).toBeInstanceOf(Money);
    expect(back.cents).toBe(1999n);
    expect(runs).toBe(1);
    // read without deserialize: refused, never re-run
    await expect(l.idempotent('money', pay)).rejects.toBeInstanceOf(UnserializableError);
    const bad = {
      serialize: () => {
        throw new Error('no codec');
      },
      deserialize: (s: string) => s,
    };
    await expect(l.idempotent('bad', pay, bad)).rejects.toBeInstanceOf(UnserializableError);
    await expect(l.idempotent('bad', pay, bad)).rejects.toBeInstanceOf(UnserializableError);
    expect(runs).toBe(2);
  });

  test('options are checked before anything runs', async () => {
    const l = await locks();
    const fn = () => 1;
    await expect(l.idempotent('o', fn, { serialize: 'json' as never })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(l.idempotent('o', fn, { serialize: String })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(l.idempotent('o', fn, { bogus: 1 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

test('a record stored before the codec (plain JSON) still reads back', async () => {
  const prefix = `idem-old-${randomUUID().slice(0, 8)}`;
  const admin = await clients.make('ioredis');
  const l = createLocks(redis(admin), { prefix });
  open.push(l);
  await admin.set(redisKeys(`${prefix}:idem:old`).result, JSON.stringify({ v: { charged: 42, at: 'once' } }));
  let runs = 0;
  expect(await l.idempotent('old', () => (runs++, null))).toEqual({ charged: 42, at: 'once' });
  expect(runs).toBe(0);
});
