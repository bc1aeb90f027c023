/**
 * Locks.close() at shutdown with the server gone, on leasehold's own client and a server this
 * file owns. The session ends with close() and the server deletes its nodes with it (or expires
 * it), so close() does not wait for releases a server out of reach cannot answer. On the old code
 * the releases waited out opTimeout (5 s here): close() took 5.0 s with the server frozen and
 * 5.0 s with it killed.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { connectZookeeper, type ZookeeperBackend } from '../../src/backends/zookeeper/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { haveZookeeper, startCluster, type ZkCluster } from '../support/zkserver.js';
import { clientState, Zk } from '../support/zookeeper.js';
import { took, until } from '../support/until.js';

describe('zookeeper: Locks.close() with the server out of reach (own server)', () => {
  let cluster: ZkCluster;
  let zk: Zk;
  const open: Locks[] = [];
  let n = 0;
  const key = () => `k${++n}-${process.pid}`;

  beforeAll(async () => {
    if (!haveZookeeper()) throw new Error('ZooKeeper is not installed (run scripts/services.sh)');
    cluster = await startCluster(1, 200);
    zk = new Zk(cluster.hosts);
  }, 60_000);

  afterAll(async () => {
    await cluster?.heal();
    await Promise.allSettled(open.map((l) => l.close()));
    await zk?.closeAll();
    await cluster?.destroy();
  }, 30_000);

  /** Two leases held (opTimeout 5 s, the default) on a backend of its own client. */
  async function holding(): Promise<{ backend: ZookeeperBackend; locks: Locks; keys: string[] }> {
    const backend = await connectZookeeper(cluster.hosts, { sessionTimeout: 4000 });
    const locks = createLocks(backend, { ttl: 4000, prefix: 'close' });
    open.push(locks);
    const keys = [key(), key()];
    for (const k of keys) await locks.acquire(k);
    return { backend, locks, keys };
  }

  test('with the server answering, close() releases: the lock nodes are gone when it resolves', async () => {
    const { backend, locks, keys } = await holding();
    expect(await took(locks.close(), 10_000)).toBeLessThan(2000);
    for (const k of keys) expect(await zk.lockNodes(`close:${k}`)).toEqual([]);
    expect(clientState(backend)).toBe(-2);
  }, 30_000);

  test('with the server frozen (SIGSTOP), close() gives up on it after a short grace and closes the client', async () => {
    const { backend, locks, keys } = await holding();
    const server = cluster.servers[0]!;
    server.stop();
    try {
      const ms = await took(locks.close(), 15_000);
      expect(ms).toBeLessThan(1000 + 1000); // CLOSE_GRACE_MS, not opTimeout (5 s)
      await until('the own client closed', () => clientState(backend) === -2, 2000);
    } finally {
      server.cont();
    }
    // the leases it could not release end with the session (4 s): the server deletes the nodes
    await until(
      'the nodes gone with the session',
      async () => (await zk.lockNodes(`close:${keys[0]}`)).length === 0,
      15_000,
    );
  }, 40_000);

  test('with the server killed, close() returns at once', async () => {
    const { backend, locks } = await holding();
    const server = cluster.servers[0]!;
    await server.kill();
    try {
      await until('the connection lost', () => backend.sessionState === 'SUSPENDED', 5000);
      expect(await took(locks.close(), 15_000)).toBeLessThan(500);
      await until('the own client closed', () => clientState(backend) === -2, 2000);
    } finally {
      await server.start();
    }
  }, 40_000);
});
