/**
 * close() with the server out of reach and a waiter queued: it waited for the deletion of the
 * waiter's node, which waits for a reconnect that never comes (backend.close() was still pending
 * after 20 s; Locks.close() gave up after opTimeout, but leasehold's own client was never closed
 * and kept the process alive). Our own client's session ends with close() — the server deletes
 * its nodes with it — so close() no longer waits for a connection, and always closes the client.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { clientState, Zk, ZK_HOSTS } from '../support/zookeeper.js';
import { took, until } from '../support/until.js';

const port = Number(ZK_HOSTS.split(',')[0]!.split(':')[1] ?? 2181);
const zk = new Zk();
const open: Locks[] = [];
let n = 0;

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await zk.closeAll();
});

/** A holder on the server, and a waiter (its node queued) behind a proxy that is then shut. */
async function cutOffWaiter(opTimeout = 5000) {
  const key = `k-${process.pid}-${++n}`;
  const holder = createLocks(await zk.backend({ sessionTimeout: 4000 }), { ttl: 4000, prefix: 'close' });
  open.push(holder);
  const proxy = new Proxy(port);
  await proxy.listen();
  const backend = await connectZookeeper(`127.0.0.1:${proxy.port}`, { sessionTimeout: 4000 });
  const locks = createLocks(backend, { ttl: 4000, prefix: 'close', opTimeout });
  open.push(locks);
  const held = await holder.acquire(key);
  const waiter = locks.acquire(key, { wait: '60s' }).catch((e: unknown) => e);
  await until('the waiter queued', async () => (await zk.lockNodes(`close:${key}`)).length === 2, 5000);
  await proxy.close(); // its connections reset, and new ones refused
  await until('the waiter cut off', () => backend.sessionState === 'SUSPENDED', 5000);
  return { key, held, backend, locks, waiter };
}

describe('zookeeper close() with the server out of reach', () => {
  test('backend.close() finishes at once, closes its client, and the waiter node goes with the session', async () => {
    const { key, held, backend, waiter } = await cutOffWaiter();
    expect(await took(backend.close(), 10_000)).toBeLessThan(1000);
    await until('the own client closed', () => clientState(backend) === -2, 3000);
    // the server expires the session (4 s) and deletes the waiter's node: the holder's alone
    await until('the waiter node gone', async () => (await zk.lockNodes(`close:${key}`)).length === 1, 10_000);
    await held.release();
    void waiter;
  }, 30_000);

  test('Locks.close() finishes within opTimeout and closes the client', async () => {
    const { held, backend, locks, waiter } = await cutOffWaiter(1000);
    // the waiter's leave no longer waits for a reconnect (close-unreachable.test.ts); the bound stays
    expect(await took(locks.close(), 10_000)).toBeLessThan(1000 + 1500);
    expect(await waiter).toBeInstanceOf(Error);
    await until('the own client closed', () => clientState(backend) === -2, 3000);
    await held.release();
  }, 30_000);
});
