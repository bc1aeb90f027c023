/**
 * Locks.close() at shutdown on a fromUrl etcd backend (a client of leasehold's own) with the
 * server out of reach. Its locks hang off the backend's lease, which close() revokes or, with no
 * keep-alive after it, etcd ends by its TTL: the releases need not wait out opTimeout for a
 * server that does not answer (the ZooKeeper backend's close-unreachable, by the same hook,
 * `Backend.closing()`). On the old code close() took 5.0 s here with the member frozen (the
 * releases waited out opTimeout), and 10.0 s with the default 10 s leaseTtl (then opTimeout more
 * for the backend's revoke); 11 ms with it killed (calls fail at once). A call already in flight
 * when close() began (an acquire, a waiter's leave, a renewal, an inspect) is given up the same
 * way: before, close() waited out opTimeout for it. On an etcd member of this file's own.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { etcd } from '../../src/backends/etcd/index.js';
import {
  ClosedError,
  createLocks,
  fromUrl,
  LeaseholdError,
  LockTimeoutError,
  type Lease,
  type Locks,
} from '../../src/index.js';
import { EtcdClients } from '../support/etcd.js';
import { EtcdCluster } from '../support/etcd-cluster.js';
import { took, until } from '../support/until.js';

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

/** Locks on a fromUrl backend (a client of leasehold's own) with a 2 s lease; opTimeout 5 s, the default. */
async function own(): Promise<Locks> {
  const locks = createLocks(await fromUrl(`etcd://${member.hosts[0]}?leaseTtl=2s`), { ttl: '2s', prefix: 'cu' });
  open.push(locks);
  return locks;
}

/** Two leases held on `own()`. */
async function holding(): Promise<{ locks: Locks; keys: string[]; leases: Lease[] }> {
  const locks = await own();
  const keys = [key(), key()];
  const leases: Lease[] = [];
  for (const k of keys) leases.push(await locks.acquire(k));
  return { locks, keys, leases };
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
  await expectFree(keys);
}, 40_000);

/**
 * The locks are free: the calls sent reach the server when it resumes, and even without them
 * nothing kept the lease alive after close() (etcd ends it by its 2 s TTL).
 */
async function expectFree(keys: readonly string[]): Promise<void> {
  const other = await observer();
  for (const k of keys) {
    const lease = await other.acquire(k, { wait: '10s' });
    await lease.release();
  }
}

// On the old code each took opTimeout (5 s) and more: the engine's close waits for every call in
// flight to settle, and these were not bounded by closing() (only releases and the revoke were).
test.each(['acquire', 'extend', 'inspect'] as const)(
  'with the server frozen, an %s in flight when close() begins is given up after the same grace',
  async (what) => {
    const { locks, keys, leases } = await holding();
    const fresh = key();
    member.stopMember(0);
    let ms: number;
    let call: Promise<unknown>;
    try {
      // in flight at once: the engine hands it to the driver before it returns
      if (what === 'acquire') call = locks.acquire(fresh);
      else if (what === 'extend') call = leases[0]!.extend();
      else call = locks.inspect(keys[0]!);
      call.catch(() => {});
      ms = await took(locks.close(), 20_000);
    } finally {
      member.cont(0);
    }
    expect(ms).toBeLessThan(1000 + 1000); // CLOSE_GRACE_MS, not opTimeout (5 s)
    await expect(call).rejects.toBeInstanceOf(LeaseholdError);
    await expectFree([...keys, fresh]);
  },
  40_000,
);

test('with the server frozen, a waiter that gave up its place just before close() does not hold close()', async () => {
  const k = key();
  const holder = await own();
  await holder.acquire(k, { ttl: '30s' });
  const locks = await own();
  const raw = await clients.make(member.hosts);
  const entries = async () => (await raw.getAll().prefix(`cu:${k}/`).keys()).length;
  // ttl 30 s: the waiter's pause (ttl/3) outlasts its wait, so it ends in the pause and leaves
  const waiting = locks.acquire(k, { ttl: '30s', wait: '1500ms' }).catch((e: unknown) => e);
  await until('the waiter is queued', async () => (await entries()) === 2, 5000);
  member.stopMember(0);
  let ms: number;
  try {
    // its wait is over: the engine sent its leave (which the frozen server does not answer)
    expect(await waiting).toBeInstanceOf(LockTimeoutError);
    ms = await took(locks.close(), 20_000);
  } finally {
    member.cont(0);
  }
  expect(ms).toBeLessThan(1000 + 1000); // before: opTimeout (5 s), waiting for the leave
  // once the server is back, the waiter's entry is gone (its leave, or its lease's end)
  await until("the waiter's entry is gone", async () => (await entries()) <= 1, 10_000);
}, 40_000);

test('with the server frozen, an acquire opening the first session when close() begins does not hold close()', async () => {
  const locks = await own(); // no etcd lease yet: the first acquire grants one
  member.stopMember(0);
  let ms: number;
  let call: Promise<unknown>;
  try {
    call = locks.acquire(key());
    call.catch(() => {});
    ms = await took(locks.close(), 20_000);
  } finally {
    member.cont(0);
  }
  expect(ms).toBeLessThan(1000 + 1000); // before: opTimeout (5 s), then 1 s for the grant close() waits for
  await expect(call).rejects.toBeInstanceOf(ClosedError);
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
