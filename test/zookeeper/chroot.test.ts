/**
 * A chroot that does not exist yet (a fresh ensemble, the README's `zk://zk1:2181,…/apps`) is
 * created by the clients leasehold makes; before, every acquire failed with NO_NODE. A user's
 * own client chrooted to a missing path gets an error that says so.
 */
import { randomUUID } from 'node:crypto';
import zk from 'node-zookeeper-client';
import { afterAll, describe, expect, test } from 'vitest';
import { connectZookeeper, zookeeper } from '../../src/backends/zookeeper/index.js';
import { BackendError, createLocks, fromUrl, type Locks } from '../../src/index.js';
import { call, rawClient, ZK_ENSEMBLE, ZK_HOSTS } from '../support/zookeeper.js';

const top = `/lh-chroot-${process.pid}-${randomUUID().slice(0, 6)}`;
const open: Locks[] = [];

afterAll(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  for (const hosts of [ZK_HOSTS, ZK_ENSEMBLE]) {
    const admin = await rawClient(hosts);
    await call((cb) => admin.removeRecursive(top, -1, cb)).catch(() => {});
    admin.close();
  }
});

const exists = async (path: string, hosts = ZK_HOSTS): Promise<boolean> => {
  const admin = await rawClient(hosts);
  try {
    return !!(await call((cb) => admin.exists(path, cb)));
  } finally {
    admin.close();
  }
};

describe('zookeeper: a chroot that does not exist', () => {
  test('fromUrl creates it: acquire, inspect, list and results work under it', async () => {
    const chroot = `${top}/url/apps`;
    expect(await exists(top)).toBe(false);
    const locks = createLocks(await fromUrl(`zk://${ZK_HOSTS}${chroot}?sessionTimeout=5s`), {
      prefix: 'chroot',
      ttl: '5s',
    });
    open.push(locks);
    const lease = await locks.acquire('a', { value: 'me' });
    expect(await locks.inspect('a')).toMatchObject({ fence: lease.fence, value: 'me' });
    const seen: string[] = [];
    for await (const info of locks.list()) seen.push(info.key);
    expect(seen).toEqual(['a']);
    expect(await locks.idempotent('job', () => 42)).toBe(42);
    expect(await locks.idempotent('job', () => 43)).toBe(42);
    expect(await exists(`${chroot}/leasehold/locks/chroot:a`)).toBe(true);
    await lease.release();
  });

  test("connectZookeeper on the ensemble (the README's example) creates it", async () => {
    const chroot = `${top}/ensemble`;
    const backend = await connectZookeeper(`${ZK_ENSEMBLE}${chroot}`, { sessionTimeout: '5s' });
    const locks = createLocks(backend, { prefix: 'chroot', ttl: '5s' });
    open.push(locks);
    const r = await locks.withLock('b', (l) => l.fence);
    expect(typeof r).toBe('bigint');
    expect(await exists(`${chroot}/leasehold`, ZK_ENSEMBLE)).toBe(true);
  });

  test("a user's client chrooted to a missing path: a BackendError that names the chroot", async () => {
    const chroot = `${top}/missing`;
    const client = zk.createClient(`${ZK_HOSTS}${chroot}`, { sessionTimeout: 5000, spinDelay: 100, retries: 0 });
    client.connect();
    try {
      const locks = createLocks(zookeeper(client), { prefix: 'chroot', ttl: '5s' });
      open.push(locks);
      const err = await locks.tryAcquire('c').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BackendError);
      expect((err as Error).message).toContain(`"${chroot}" does not exist`);
      expect(await exists(chroot)).toBe(false);
    } finally {
      client.close();
    }
  });
});
