/**
 * The smaller holes of issue #9.6, against the real Redis: every backend option validated, a bad
 * election TTL refused at elect(), ill-formed UTF-16 refused before any I/O, fenced resources in
 * a namespace of their own.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { fencedSet, redis, resourceKeyOf } from '../../src/backends/redis/index.js';
import { memory } from '../../src/backends/memory/index.js';
import { createLocks, InvalidArgumentError, type Locks } from '../../src/index.js';
import { Clients, type ClientKind } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

describe.each(['ioredis', 'node-redis'] as ClientKind[])('%s', (kind) => {
  test('redis(client, options): every option is validated', async () => {
    const c = await clients.make(kind);
    for (const bad of ['abc', -1, NaN, Infinity, null, {}, '5 parsecs']) {
      expect(() => redis(c, { lingerMs: bad as never })).toThrow(InvalidArgumentError);
    }
    expect(() => redis(c, { lingerMs: 0 })).not.toThrow();
    expect(() => redis(c, { lingerMs: '2s' })).not.toThrow();
    expect(() => redis(c, { linger: 5 } as never)).toThrow(InvalidArgumentError);
  });

  test('elect(name, { ttl: -1 }) is refused at elect(), before any campaign', async () => {
    const locks = createLocks(redis(await clients.make(kind)));
    open.push(locks);
    for (const ttl of [-1, 0, NaN, 'soon']) {
      expect(() => locks.elect('e', { value: 'v', ttl: ttl as never })).toThrow(InvalidArgumentError);
    }
    expect(() => locks.elect('e', { value: 'v\uD800' })).toThrow(InvalidArgumentError);
  });

  test('keys, prefixes, names and values with a lone surrogate are refused before any I/O', async () => {
    const c = await clients.make(kind);
    const locks = createLocks(redis(c), { prefix: `holes-${randomUUID().slice(0, 8)}` });
    open.push(locks);
    // both would become "order\uFFFD" on the wire: the same lock for two different keys
    for (const key of ['order\uD800', 'order\uDBFF', '\uDC00', 'a\uD800b']) {
      await expect(locks.acquire(key)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(locks.tryAcquire(key)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(locks.withLock(key, () => 1)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(locks.inspect(key)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(locks.idempotent(key, () => 1)).rejects.toBeInstanceOf(InvalidArgumentError);
      expect(() => locks.elect(key, { value: 'v' })).toThrow(InvalidArgumentError);
      await expect(fencedSet(c, key, 'v', 1n)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(locks.acquire('ok', { value: 'v\uDFFF' })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(() => createLocks(memory(), { prefix: 'p\uD800' })).toThrow(InvalidArgumentError);
    // a well-formed astral character (a surrogate pair) is a fine key
    const lease = await locks.acquire('order-\u{1F600}');
    expect(await lease.release()).toBe(true);
  });

  test('fencedSet resources cannot collide with lock keys (nor their fence, queue, value or result)', async () => {
    const c = await clients.make(kind);
    const admin = await clients.make('ioredis');
    const prefix = `holes-${randomUUID().slice(0, 8)}`;
    const locks = createLocks(redis(c), { prefix });
    open.push(locks);
    const lease = await locks.acquire('nightly', { ttl: '5s' });
    // the resource named like the lock's full key, and like its fence counter
    for (const resource of [`${prefix}:nightly`, `${prefix}:nightly}:fence`, `{${prefix}:nightly}`]) {
      await fencedSet(c, resource, 'payload', 7n);
      expect(await admin.get(resourceKeyOf(resource))).toBe('payload');
    }
    expect(await admin.pttl(`{${prefix}:nightly}`)).toBeGreaterThan(0); // the lock kept its TTL
    expect(await lease.release()).toBe(true);
    const again = await locks.tryAcquire('nightly');
    expect(again).not.toBeNull(); // and is free again once released: nothing blocks it
    expect(again!.fence > lease.fence).toBe(true);
    await again!.release();
  });
});
