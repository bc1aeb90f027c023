/**
 * backend.watch() (Election.observe()) started and ended many times on a key whose holders do not
 * change: what it leaves registered in the client must stay bounded. ZooKeeper has no way to take
 * a watch back; node-zookeeper-client keeps one listener per path and function until the watch
 * fires.
 *
 * On the old code every watch() registered a function of its own: each ended observe() left a
 * listener behind until the key's next change (a stable leader: never), and the eleventh made
 * Node print a MaxListenersExceededWarning ("Possible EventEmitter memory leak detected").
 */
import { afterEach, describe, expect, test } from 'vitest';
import { encodeKey, type ZookeeperBackend } from '../../src/backends/zookeeper/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { until } from '../support/until.js';
import { Zk } from '../support/zookeeper.js';

const zk = new Zk();
const open: Locks[] = [];

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await zk.closeAll();
});

/** The listeners node-zookeeper-client keeps for `path`, over its three kinds of watches. */
function listeners(backend: ZookeeperBackend, path: string): number {
  const wm = (backend as unknown as { zk: { client: any } }).zk.client.connectionManager.watcherManager;
  let n = 0;
  for (const kind of ['dataWatchers', 'childWatchers', 'existenceWatchers']) {
    n += wm[kind][path]?.listeners('notification').length ?? 0;
  }
  return n;
}

describe('zookeeper: watches that end', () => {
  test('50 watches started and ended on a held key leave one listener, and no leak warning', async () => {
    const backend = await zk.backend();
    const locks = createLocks(backend, { prefix: 'watch-leak' });
    open.push(locks);
    const k = `k-${process.pid}-1`;
    const lease = await locks.acquire(k);
    const dir = `/leasehold/locks/${encodeKey(`watch-leak:${k}`)}`;
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      for (let i = 0; i < 50; i++) {
        const unwatch = await backend.watch(`watch-leak:${k}`, () => {});
        unwatch();
      }
      await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
      expect(listeners(backend, dir)).toBeLessThanOrEqual(1);
      expect(warnings).not.toContain('MaxListenersExceededWarning');

      // a watch started after them is still told of a change
      let changes = 0;
      const unwatch = await backend.watch(`watch-leak:${k}`, () => changes++);
      await lease.release();
      await until('the watch to report the release', () => changes > 0, 3000);
      unwatch();
    } finally {
      process.off('warning', onWarning);
    }
  });
});
