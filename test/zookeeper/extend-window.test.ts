/**
 * A lease extended to a TTL longer than the session timeout. The session no longer covers it: a
 * holder cut off from the servers keeps its lease for the whole new TTL on its own clock, while
 * the server expires its session after the session timeout and grants the lock to the next in
 * line. What keeps the lock for the lease's new end is the key's window node, so it must follow
 * the lease: every renewal stores the new end again.
 *
 * On the old code only the extension itself wrote the window; the renewals after it only
 * probed the node (`exists`), so once the first extended TTL had passed, a black-holed holder
 * still held its lease (held true, signal not aborted) when another client was granted the lock:
 * two holders.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { sleep } from '../support/until.js';
import { Zk, ZK_HOSTS } from '../support/zookeeper.js';

const port = Number(ZK_HOSTS.split(',')[0]!.split(':')[1] ?? 2181);
const zk = new Zk();
const open: Locks[] = [];
const proxies: Proxy[] = [];

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await Promise.allSettled(proxies.splice(0).map((p) => p.close()));
  await zk.closeAll();
});

describe('zookeeper: a lease extended past the session timeout', () => {
  test('a holder cut off from the servers has lost its lease before anyone else is granted the lock', async () => {
    const proxy = new Proxy(port);
    proxies.push(proxy);
    await proxy.listen();
    const backend = await connectZookeeper(`127.0.0.1:${proxy.port}`, { sessionTimeout: 1500 });
    const a = createLocks(backend, { ttl: 1200, prefix: 'extend-window' });
    open.push(a);
    const b = createLocks(await zk.backend({ sessionTimeout: 1500 }), { ttl: 1200, prefix: 'extend-window' });
    open.push(b);

    const k = `k-${process.pid}-1`;
    const lease = await a.acquire(k);
    await lease.extend(4000); // renewed every 1.33 s from now on, at 4 s each time
    await sleep(4500); // past the end the extension itself stored; the lease is renewed meanwhile
    expect(lease.held).toBe(true);

    proxy.setMode({ kind: 'blackhole' }); // the holder hears nothing more, nor does the server from it
    const next = await b.acquire(k, { wait: '20s' });
    const heldByBoth = lease.held;
    const aborted = lease.signal.aborted;
    expect({ heldByBoth, aborted }).toEqual({ heldByBoth: false, aborted: true });
    expect(next.fence).toBeGreaterThan(lease.fence);
    await next.release();
  }, 45_000);
});
