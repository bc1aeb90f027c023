/**
 * A release whose `remove` reached the server but whose reply was lost (the connection dropped
 * after the request was forwarded): the retry on the same session finds the node gone because
 * the first attempt deleted it. That is a release, not a lock found gone: withLock and
 * runExclusive resolve. On the old code the retry's NO_NODE made release() false and both
 * rejected with a spurious LeaseLostError. A TCP proxy (test/faults/proxy.ts) between the backend
 * and the shared server holds the replies while the remove goes through, then resets the
 * connection; the client reconnects to the same session.
 */
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { Zk, ZK_HOSTS } from '../support/zookeeper.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, ok: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await ok()) return;
    await sleep(20);
  }
  throw new Error(`timed out after ${ms}ms waiting for ${what}`);
}

const zk = new Zk();
const open: Locks[] = [];
const proxies: Proxy[] = [];
let n = 0;
const key = () => `lost-reply-${process.pid}-${++n}`;

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await Promise.allSettled(proxies.splice(0).map((p) => p.close()));
});
afterAll(() => zk.closeAll());

describe('zookeeper: a release whose remove went through but whose reply was lost', () => {
  async function viaProxy(): Promise<{ locks: Locks; proxy: Proxy }> {
    const port = Number(ZK_HOSTS.split(',')[0]!.split(':')[1]);
    const proxy = new Proxy(port);
    proxies.push(proxy);
    await proxy.listen();
    const backend = await connectZookeeper(`127.0.0.1:${proxy.port}`, { sessionTimeout: 10_000 });
    const locks = createLocks(backend, { ttl: 10_000, prefix: 'lr' });
    open.push(locks);
    return { locks, proxy };
  }

  /**
   * Inside fn: from now on the replies are held; once the server has deleted our node (the
   * release's remove went through), the connection is reset, and then flows again.
   */
  function loseTheReleaseReply(proxy: Proxy, k: string): Promise<void> {
    proxy.setMode({ kind: 'hold' });
    return until('the release to delete our node', async () => (await zk.lockNodes(`lr:${k}`)).length === 0, 8000).then(
      () => {
        proxy.reset(); // the held reply is dropped with the connection: CONNECTION_LOSS for the remove
        proxy.setMode({ kind: 'pass' });
      },
    );
  }

  test('withLock resolves (the retry finds the node its first attempt deleted)', async () => {
    const { locks, proxy } = await viaProxy();
    const k = key();
    let lost: Promise<void> | null = null;
    const value = await locks.withLock(k, () => {
      lost = loseTheReleaseReply(proxy, k);
      return 'done';
    });
    await lost;
    expect(value).toBe('done');
    expect(await zk.lockNodes(`lr:${k}`)).toEqual([]);
    expect(proxy.connections).toBeGreaterThan(0); // it reconnected through the proxy
  }, 30_000);

  test('runExclusive resolves too, and the key can be taken again at once', async () => {
    const { locks, proxy } = await viaProxy();
    const k = key();
    let lost: Promise<void> | null = null;
    const r = await locks.runExclusive(k, () => {
      lost = loseTheReleaseReply(proxy, k);
      return 7;
    });
    await lost;
    expect(r).toEqual({ ran: true, value: 7 });
    const again = await locks.tryAcquire(k);
    expect(again).not.toBeNull();
    await again!.release();
  }, 30_000);
});
