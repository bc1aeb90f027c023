/**
 * withLock and runExclusive (with no lockAtLeastFor window to keep) whose lock was deleted or
 * taken over under a short fn — one that ends well before the TTL, before any renewal or expiry
 * noticed — find it at their token-checked release, which returns false: another process may have
 * run beside fn, so they reject with LeaseLostError (before, they resolved as if all was well).
 * fn's own error still wins, and the normal case resolves. On the memory backend, a real Redis
 * (127.0.0.1:6379: ioredis, ioredis in session mode, node-redis; the key deleted by another
 * client) and SQLite (the row deleted by another connection).
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { redis } from '../../src/backends/redis/index.js';
import { sqlite } from '../../src/backends/sqlite/index.js';
import { createLocks, LeaseLostError, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';
import { TempDbs } from '../support/sqlite.js';

const clients = new Clients();
const dbs = new TempDbs();
const open: Locks[] = [];
const make = (backend: Backend, opts = {}) => {
  const l = createLocks(backend, opts);
  open.push(l);
  return l;
};
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  await clients.closeAll();
  dbs.cleanup();
});

const GONE = /no longer held when it was released/;

/**
 * The cases on one backend: `pair()` makes two Locks on one server and `remove(key)` deletes the
 * lock of `key` (as named to the Locks) from outside, as an admin or a bug would.
 */
function cases(pair: () => Promise<{ a: Locks; b: Locks; remove: (key: string) => Promise<unknown> }>) {
  test('withLock: the lock deleted and taken over under a short fn: rejects with LeaseLostError', async () => {
    const { a, b, remove } = await pair();
    let elsewhere: unknown;
    const run = a.withLock(
      'job',
      async () => {
        await remove('job');
        elsewhere = await b.tryAcquire('job', { ttl: '1m' }); // another process takes it
        return 'a done';
      },
      { ttl: '30s' },
    );
    const e = await run.catch((x: unknown) => x);
    expect(e).toBeInstanceOf(LeaseLostError);
    expect((e as LeaseLostError).key).toBe('job');
    expect((e as Error).message).toMatch(GONE);
    expect(elsewhere).not.toBeNull();
    expect((await b.inspect('job'))?.fence).toBe((elsewhere as { fence: bigint }).fence); // b's lock left alone
  });

  test('withLock: the lock deleted under a short fn (nobody took it): rejects with LeaseLostError', async () => {
    const { a, remove } = await pair();
    await expect(a.withLock('del', () => remove('del'), { ttl: '30s' })).rejects.toThrow(GONE);
    expect(await a.inspect('del')).toBeNull();
  });

  test('runExclusive with no window: the lock deleted under a short fn rejects with LeaseLostError', async () => {
    const { a, b, remove } = await pair();
    let elsewhere: unknown;
    const run = a.runExclusive(
      'nightly',
      async () => {
        await remove('nightly');
        elsewhere = await b.runExclusive('nightly', () => 'b ran', { lockAtMostFor: '1m' });
        return 'a done';
      },
      { lockAtMostFor: '5m' },
    );
    await expect(run).rejects.toThrow(GONE);
    expect(elsewhere).toEqual({ ran: true, value: 'b ran' }); // the job ran twice at the same time
    expect(await b.inspect('nightly')).toBeNull();
  });

  test("fn's own error wins over the lock found gone at the release", async () => {
    const { a, remove } = await pair();
    const mine = new Error('fn failed');
    const fail = async () => {
      await remove('err');
      throw mine;
    };
    await expect(a.withLock('err', fail, { ttl: '30s' })).rejects.toBe(mine);
    await expect(a.runExclusive('err', fail, { lockAtMostFor: '30s' })).rejects.toBe(mine);
  });

  test('the normal case resolves, and releases', async () => {
    const { a } = await pair();
    await expect(a.withLock('ok', () => 'value', { ttl: '30s' })).resolves.toBe('value');
    await expect(a.runExclusive('ok', () => 'value', { lockAtMostFor: '30s' })).resolves.toEqual({
      ran: true,
      value: 'value',
    });
    expect(await a.inspect('ok')).toBeNull();
  });
}

describe('memory', () => {
  cases(async () => {
    const store = new MemoryStore();
    return {
      a: make(memory({ store })),
      b: make(memory({ store })),
      remove: async (key: string) => store.locks.delete(`leasehold:${key}`),
    };
  });
});

describe.each([
  ['ioredis', false],
  ['ioredis', true],
  ['node-redis', false],
] as const)('redis (%s, session: %s)', (kind, session) => {
  cases(async () => {
    const prefix = `lh-gone-${randomUUID().slice(0, 8)}`;
    const raw = await clients.make('ioredis');
    return {
      a: make(redis(await clients.make(kind), { session }), { prefix }),
      b: make(redis(await clients.make(kind), { session }), { prefix }),
      remove: (key: string) => raw.del(`{${prefix}:${key}}`),
    };
  });
});

describe('sqlite', () => {
  cases(async () => {
    const path = dbs.path();
    const a = make(sqlite(path));
    const b = make(sqlite(path));
    return {
      a,
      b,
      remove: async (key: string) => {
        const raw = new Database(path, { timeout: 2000 });
        try {
          raw.prepare('DELETE FROM leasehold_locks WHERE key = ?').run(`leasehold:${key}`);
        } finally {
          raw.close();
        }
      },
    };
  });
});
