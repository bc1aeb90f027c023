/**
 * Locks.close() at shutdown on a fromUrl etcd backend (a client of leasehold's own) with the
 * server out of reach. Its locks hang off the backend's lease, which close() revokes or, with no
 * keep-alive after it, etcd ends by its TTL: the releases need not wait out opTimeout for a
 * server that does not answer (the ZooKeeper backend's close-unreachable, by the same hook,
 * `Backend.closing()`). On the old code close() took 5.0 s here with the member frozen (the
 * releases waited out opTimeout), and 10.0 s with the default 10 s leaseTtl (then opTimeout more
 * for the backend's revoke); 11 ms with it killed (calls fail at once). On an etcd member of this
 * file's own.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { etcd } from '../../src/backends/etcd/index.js';
import { createLocks, fromUrl, type Locks } from '../../src/index.js';
import { EtcdClients } from '../support/etcd.js';
import { EtcdCluster } from '../support/etcd-cluster.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let member: EtcdCluster;
const clients = new EtcdClients();
const open: Locks[] = [];
let n = 0;
const key = () => `k${++n}-${process.pid}`;

beforeAll(async () => {
  member = await EtcdCluster.start(1);
}, 60_000);
afterAll(async () => {
  member?.cont(0);
  await Promise.allSettled(open.map((l) => l.close()));
  clients.closeAll();
  await member?.stop();
}, 30_000);

/** How long `p` took, or Infinity when it had not settled after `ms`. */
async function took(p: Promise<unknown>, ms: number): Promise<number> {
  const t0 = performance.now();
  const done = await Promise.race([p.then(() => true), sleep(ms).then(() => false)]);
  return done ? performance.now() - t0 : Infinity;
}

/** Two leases held (opTimeout 5 s, the default) on a fromUrl backend with a 2 s lease. */
async function holding(): Promise<{ locks: Locks; keys: string[] }> {
  const locks = createLocks(await fromUrl(`etcd://${member.hosts[0]}?leaseTtl=2s`), { ttl: '2s', prefix: 'cu' });
  open.push(locks);
  const keys = [key(), key()];
  for (const k of keys) await locks.acquire(k);
  return { locks, keys };
}

/** Locks on a client of the test's own, to see what is free. */
async function observer(): Promise<Locks> {
  const locks = createLocks(etcd(await clients.make(member.hosts)), { ttl: '2s', prefix: 'cu' });
  open.push(locks);
  return locks;
}

test('with the server answering, close() releases at once: the locks are free when it resolves', async () => {
  const { locks, keys } = await holding();
  const other = await observer();
  expect(await took(locks.close(), 10_000)).toBeLessThan(1000);
  for (const k of keys) expect(await other.inspect(k)).toBeNull();
}, 30_000);

test('with the server frozen (SIGSTOP), close() gives up on it after a short grace; the locks are free after', async () => {
  const { locks, keys } = await holding();
  member.stopMember(0);
  let ms: number;
  try {
    ms = await took(locks.close(), 20_000);
  } finally {
    member.cont(0);
  }
  expect(ms).toBeLessThan(1000 + 1000); // CLOSE_GRACE_MS, not opTimeout (5 s) twice
  // the locks are free: the releases and revoke sent reach the server when it resumes, and even
  // without them nothing kept the lease alive after close() (etcd ends it by its 2 s TTL)
  const other = await observer();
  for (const k of keys) {
    const lease = await other.acquire(k, { wait: '10s' });
    await lease.release();
  }
}, 40_000);

test('with the server killed, close() returns at once', async () => {
  const { locks } = await holding();
  await member.kill(0);
  try {
    expect(await took(locks.close(), 20_000)).toBeLessThan(1000);
  } finally {
    await member.restart(0);
  }
}, 40_000);
