/**
 * Redlock over clients whose replies differ from the defaults: ioredis with `stringNumbers`
 * (integer replies as strings) and node-redis mapping strings to Buffers (RESP2 and RESP3). The
 * backend must read grants, refusals, renewals and releases alike on every node (3 shared nodes).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient, RESP_TYPES } from 'redis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { redlock } from '../../src/backends/redlock/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { requireShared } from './nodes.js';

const PORTS = [7001, 7002, 7003];
const prefix = `lh-rlclients-${randomUUID().slice(0, 8)}`;
const closers: (() => Promise<unknown> | void)[] = [];
beforeAll(() => requireShared(PORTS));
afterAll(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** Grant, refusal (held, and held with no expiry), renewal, inspect, release, next grant. */
async function exercise(locks: Locks, admins: Redis[], name: string) {
  const held = await locks.tryAcquire(name, { value: 'v1' });
  expect(held).not.toBeNull(); // a majority granted it
  expect(await locks.tryAcquire(name)).toBeNull();
  for (const a of admins) await a.persist(`{${prefix}:${name}}`);
  expect(await locks.tryAcquire(name)).toBeNull();
  await held!.extend('5s'); // throws when a majority refused it
  expect(await locks.inspect(name)).toMatchObject({ fence: held!.fence, value: 'v1' });
  expect(await held!.release()).toBe(true);
  expect(await locks.inspect(name)).toBeNull();
  const next = await locks.tryAcquire(name);
  expect(next!.fence > held!.fence).toBe(true);
  expect(await next!.release()).toBe(true);
}

async function adminClients(): Promise<Redis[]> {
  const admins = PORTS.map((p) => new Redis(p, '127.0.0.1', { maxRetriesPerRequest: 1 }));
  closers.push(() => admins.forEach((a) => a.disconnect()));
  return admins;
}

test('ioredis clients with stringNumbers (integer replies as strings): grants and refusals read right', async () => {
  const cs = PORTS.map((p) => new Redis(p, '127.0.0.1', { stringNumbers: true, maxRetriesPerRequest: 1 }));
  closers.push(() => cs.forEach((c) => c.disconnect()));
  const locks = createLocks(redlock(cs), { prefix, ttl: '5s' });
  closers.push(() => locks.close());
  await exercise(locks, await adminClients(), 'sn');
});

describe.each([2, 3] as const)('node-redis clients mapping strings to Buffers (RESP%d)', (resp) => {
  test('grants and refusals read right', async () => {
    const cs = await Promise.all(
      PORTS.map(async (p) => {
        const base = createClient({
          url: `redis://127.0.0.1:${p}`,
          RESP: resp,
          socket: { reconnectStrategy: false },
        } as never) as any;
        base.on('error', () => {});
        await base.connect();
        closers.push(() => base.close());
        return base.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
      }),
    );
    const locks = createLocks(redlock(cs), { prefix, ttl: '5s' });
    closers.push(() => locks.close());
    await exercise(locks, await adminClients(), `buf${resp}`);
  });
});
