/**
 * Redlock `watch()` on real nodes: a key's subscriptions are shared by its watchers and, once the
 * last one left, given up after a linger. A watch that arrives while those UNSUBSCRIBEs are on
 * their way must still be subscribed when it resolves.
 */
import { randomUUID } from 'node:crypto';
import { createClient } from 'redis';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { redlock } from '../../src/backends/redlock/index.js';
import { createLocks } from '../../src/index.js';
import { eventually, requireShared } from './nodes.js';

const PORTS = [7001, 7002, 7003];
const prefix = `lh-rlwatch-${randomUUID().slice(0, 8)}`;
const clients: any[] = [];
beforeAll(() => requireShared(PORTS));
afterAll(async () => {
  for (const c of clients) await c.close().catch(() => {});
});

test('a watch that arrives while the lingering subscriptions are given up hears the next change (node-redis)', async () => {
  const cs = await Promise.all(
    PORTS.map(async (p) => {
      const c = createClient({ url: `redis://127.0.0.1:${p}`, socket: { reconnectStrategy: false } } as never) as any;
      c.on('error', () => {});
      await c.connect();
      clients.push(c);
      return c;
    }),
  );
  const backend = redlock(cs);
  const locks = createLocks(backend, { prefix });
  const key = `${prefix}:w`;
  try {
    // the first watcher leaves; its subscriptions are given up after their linger
    (await backend.watch!(key, () => {}))();
    // a new watcher arrives just after the last UNSUBSCRIBE was sent (every node, both channels),
    // before their replies
    const second: { watch?: Promise<() => void> } = {};
    let changes = 0;
    let sent = 0;
    const subs = (backend as any).subs as any[];
    for (const s of subs) {
      const unsubscribe = s.adapter.unsubscribe.bind(s.adapter);
      s.adapter.unsubscribe = (channel: string) => {
        const p = unsubscribe(channel);
        if (++sent === 2 * subs.length) second.watch = backend.watch!(key, () => changes++);
        return p;
      };
    }
    await eventually(() => second.watch !== undefined, 5000, 'the lingering subscriptions given up');
    const unwatch = await second.watch!;
    const lease = await locks.acquire('w');
    await eventually(() => changes >= 1, 3000, 'the grant heard by the new watcher').catch(() => {});
    await lease.release();
    unwatch();
    expect(changes).toBeGreaterThanOrEqual(1);
  } finally {
    await locks.close();
  }
});
