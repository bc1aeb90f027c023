/**
 * Lock keys with braces on a Redis Cluster: every key of a lock shares its `{…}` hash tag. A full
 * key that begins with '}' (a prefix such as '}app') would make that tag empty (each key hashed
 * whole, in different slots: CROSSSLOT at every acquire): refused, before any I/O, with an
 * InvalidArgumentError. Every other brace keeps working, on a Cluster and on a single server.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks, InvalidArgumentError, type Locks } from '../../src/index.js';
import { ClusterClients } from '../support/cluster.js';
import { Clients, type ClientKind } from '../support/redis.js';

const clients = new ClusterClients();
const single = new Clients();
const open: Locks[] = [];
const id = randomUUID().slice(0, 8);
afterAll(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await clients.closeAll();
  await single.closeAll();
});

async function roundTrip(locks: Locks, key: string) {
  const lease = await locks.acquire(key, { ttl: '5s', wait: '2s' });
  expect((await locks.inspect(key))?.fence).toBe(lease.fence);
  expect(await lease.release()).toBe(true);
}

describe.each(['ioredis', 'node-redis'] as ClientKind[])('brace keys on a Redis Cluster (%s)', (kind) => {
  test("a prefix that begins with '}' is refused with InvalidArgumentError; other braces work", async () => {
    const c = await clients.make(kind);
    const bad = createLocks(redis(c), { prefix: `}lhk${id}` });
    open.push(bad);
    await expect(bad.acquire('k', { ttl: '5s', wait: '1s' })).rejects.toThrow(InvalidArgumentError);
    await expect(bad.tryAcquire('k')).rejects.toThrow(InvalidArgumentError);
    await expect(bad.runExclusive('k', () => 1, { lockAtMostFor: '5s' })).rejects.toThrow(InvalidArgumentError);
    await expect(bad.inspect('k')).rejects.toThrow(InvalidArgumentError);
    for (const prefix of [`lhk${id}}`, `{lhk${id}}`, `lhk${id}{`, `l}hk${id}`]) {
      const locks = createLocks(redis(c), { prefix });
      open.push(locks);
      for (const key of ['k', '}k', 'a}b{c', '{k}']) await roundTrip(locks, key);
    }
  });

  test("with a client keyPrefix that gives the keys a tag of its own, a '}' prefix works", async () => {
    const locks = createLocks(redis(await clients.make(kind, { keyPrefix: `x{${id}` })), { prefix: `}lhk${id}` });
    open.push(locks);
    await roundTrip(locks, 'k');
  });
});

test("a prefix that begins with '}' keeps working on a single server", async () => {
  const locks = createLocks(redis(await single.make('ioredis')), { prefix: `}lhk${id}` });
  open.push(locks);
  await roundTrip(locks, 'k');
  await roundTrip(locks, 'a}b{c');
});
