/**
 * `watch()` on the real server: a key's subscription is shared by its watchers and, once the last
 * one left, given up after `lingerMs`. A watch that arrives while that UNSUBSCRIBE is on its way
 * must still be subscribed when it resolves.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { ClosedError, createLocks } from '../../src/index.js';
import { Clients, type ClientKind } from '../support/redis.js';
import { until } from '../support/until.js';

const clients = new Clients();
const prefix = `lh-watch-${randomUUID().slice(0, 8)}`;
afterAll(() => clients.closeAll());

describe.each(['ioredis', 'node-redis'] as ClientKind[])('watch on %s', (kind) => {
  test('a watch that arrives while the lingering subscription is being given up hears the next change', async () => {
    const backend = redis(await clients.make(kind), { lingerMs: 0 });
    const locks = createLocks(backend, { prefix });
    const key = `${prefix}:w`;
    try {
      // the first watcher leaves; its subscription is given up at once (lingerMs 0)
      (await backend.watch(key, () => {}))();
      // a new watcher arrives just after that UNSUBSCRIBE was sent, before its reply
      let second: Promise<() => void> | null = null;
      const unsubscribe = backend.adapter.unsubscribe.bind(backend.adapter);
      backend.adapter.unsubscribe = (channel) => {
        const p = unsubscribe(channel);
        queueMicrotask(() => (second = backend.watch(key, () => changes++)));
        return p;
      };
      let changes = 0;
      await until('the lingering subscription given up', () => second !== null, 5000);
      const unwatch = await second!;
      const lease = await locks.acquire('w');
      await until('the grant heard by the new watcher', () => changes >= 1, 3000);
      await lease.release();
      unwatch();
      expect(changes).toBeGreaterThanOrEqual(1);
    } finally {
      await locks.close();
    }
  });

  test('a watch on a closed backend is refused, and opens no subscriber connection', async () => {
    const backend = redis(await clients.make(kind));
    await backend.close();
    await expect(backend.watch(`${prefix}:closed`, () => {})).rejects.toBeInstanceOf(ClosedError);
    // the adapter's subscriber connections: none opened after close() (it would keep the process alive)
    expect((backend.adapter as unknown as { subs: unknown[] | null }).subs).toBeNull();
  });
});
