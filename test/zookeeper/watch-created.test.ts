/**
 * backend.watch() (Election.observe()) on a key whose directory does not exist yet, created by
 * another client between the watch's `getChildren` (NO_NODE) and its `exists`: the `exists` finds
 * the directory, and the watch must still be told of every later change of its children.
 *
 * On the old code that case read the children without a watch: only a data watch on the directory
 * was left (it fires when the directory is deleted), so a contender queueing, a release, a new
 * holder were never reported while the directory lived — a missed change, which the contract
 * forbids (observe() fell back to its 1 s re-read).
 *
 * The proxy holds the server's replies to the watcher: its `getChildren` is answered NO_NODE by
 * the server, the directory is created, and only then does the reply reach the watcher.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { sleep, until } from '../support/until.js';
import { Zk, ZK_HOSTS } from '../support/zookeeper.js';

const port = Number(ZK_HOSTS.split(',')[0]!.split(':')[1] ?? 2181);
const zk = new Zk();
const open: Locks[] = [];
const proxies: Proxy[] = [];
const prefix = 'watch-created';

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await Promise.allSettled(proxies.splice(0).map((p) => p.close()));
  await zk.closeAll();
});

describe('zookeeper: a watch whose directory is created under it', () => {
  test('reports the changes after it', async () => {
    const proxy = new Proxy(port);
    proxies.push(proxy);
    await proxy.listen();
    const watcher = await connectZookeeper(`127.0.0.1:${proxy.port}`, { sessionTimeout: 10_000 });
    const wl = createLocks(watcher, { prefix });
    open.push(wl);
    const holder = createLocks(await zk.backend(), { prefix });
    open.push(holder);
    const contender = createLocks(await zk.backend(), { prefix });
    open.push(contender);
    const k = `k-${process.pid}-${Date.now()}`;
    expect(await zk.lockNodes(`${prefix}:${k}`)).toEqual([]);

    let calls = 0;
    proxy.setMode({ kind: 'hold' });
    const armed = watcher.watch(`${prefix}:${k}`, () => calls++);
    await sleep(300); // its getChildren reaches the server (NO_NODE); the reply is held
    const lease = await holder.acquire(k); // the directory is created, with the holder's node
    proxy.setMode({ kind: 'pass' });
    const unwatch = await armed;
    try {
      calls = 0;
      const waiting = contender.acquire(k, { wait: '10s' }); // a child is added: a change
      waiting.catch(() => {});
      await until('the contender in line', async () => (await zk.lockNodes(`${prefix}:${k}`)).length === 2, 5000);
      await until('the watch to report the contender', () => calls > 0, 3000);
      await lease.release();
      await (await waiting).release();
    } finally {
      unwatch();
    }
  }, 30_000);
});
