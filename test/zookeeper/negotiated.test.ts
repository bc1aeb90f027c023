/**
 * A lease's ttl is checked against the session timeout the server agreed to, never the one the
 * client asked for: until a session connected (lazyConnect, a caller's client still connecting)
 * the client reports the requested timeout, and a server with a lower maxSessionTimeout expires
 * the session (and grants the lock to another) long before a lease of the requested length ends.
 * On a server of this file's own, whose maxSessionTimeout is 2 s.
 */
import zkmod from 'node-zookeeper-client';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { connectZookeeper, zookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks, InvalidArgumentError, type Locks } from '../../src/index.js';
import { haveZookeeper, startCluster, type ZkCluster } from '../support/zkserver.js';
import { Zk } from '../support/zookeeper.js';

describe('zookeeper: ttl against the agreed session timeout (server maxSessionTimeout 2 s)', () => {
  let cluster: ZkCluster;
  let zk: Zk;
  const open: Locks[] = [];
  const clients: Array<{ close(): void }> = [];

  beforeAll(async () => {
    if (!haveZookeeper()) throw new Error('ZooKeeper is not installed (run scripts/services.sh)');
    cluster = await startCluster(1, 200, 2000);
    zk = new Zk(cluster.hosts);
  }, 60_000);

  afterAll(async () => {
    await Promise.allSettled(open.map((l) => l.close()));
    for (const c of clients) c.close();
    await zk?.closeAll();
    await cluster?.destroy();
  }, 30_000);

  test('lazyConnect asking for 10 s: a 10 s ttl is refused once the server agreed to 2 s, and nothing is left', async () => {
    const backend = await connectZookeeper(cluster.hosts, { sessionTimeout: '10s', lazyConnect: true });
    const locks = createLocks(backend, { ttl: '10s', prefix: 'agreed' });
    open.push(locks);
    const k = `lazy-${process.pid}`;
    const err = await locks.acquire(k).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toContain('2000ms');
    expect(await zk.lockNodes(`agreed:${k}`)).toEqual([]);
    const lease = await locks.acquire(k, { ttl: '2s' });
    expect(lease.held).toBe(true);
    await lease.release();
  }, 20_000);

  test("a caller's client still connecting: its requested timeout is not trusted", async () => {
    const client = zkmod.createClient(cluster.hosts, { sessionTimeout: 10_000, spinDelay: 50, retries: 0 });
    clients.push(client);
    const locks = createLocks(zookeeper(client), { ttl: '10s', prefix: 'agreed' });
    open.push(locks);
    client.connect();
    const k = `caller-${process.pid}`;
    await expect(locks.acquire(k)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await zk.lockNodes(`agreed:${k}`)).toEqual([]);
  }, 20_000);
});
