/**
 * A release (or a waiter's leave) that fails without reaching etcd: the client talks to a real
 * etcd through a TCP proxy that lets nothing through and resets every connection until etcd3
 * gives the call up (it sends a call three times). The entry is still there, under the backend's
 * etcd lease, which the client keeps alive: nobody would ever delete it, and the lock stayed
 * blocked for every process until this one closed its Locks or exited (the release had already
 * forgotten the entry, and with it the timer that frees a lock not renewed within its ttl).
 */
import { afterAll, afterEach, expect, test } from 'vitest';
import type { Etcd3 } from 'etcd3';
import { etcd } from '../../src/backends/etcd/index.js';
import { entriesOf, rangeEnd } from '../../src/backends/etcd/keys.js';
import { BackendError, createLocks, type Locks } from '../../src/index.js';
import type { Proxy } from '../faults/proxy.js';
import { EtcdClients } from '../support/etcd.js';
import { EtcdBehindProxy } from '../support/etcd-proxy.js';

const clients = new EtcdClients();
const prefix = `lh-faileddel-${process.pid}-${Date.now().toString(36)}`;
const proxied = new EtcdBehindProxy(clients, prefix);
const key = () => proxied.key();

afterEach(() => proxied.closeAll());
afterAll(() => clients.closeAll());

/**
 * Locks whose etcd client goes through a proxy, with its etcd lease (30 s: it outlives the
 * outage and etcd3's circuit breaker) already granted.
 */
const behindProxy = () => proxied.make({ leaseTtl: '30s' }, { ttl: '2s', opTimeout: '20s' });

/** Locks on a direct client: another process. */
async function direct(): Promise<Locks> {
  return proxied.track(createLocks(etcd(await clients.make()), { prefix, ttl: '2s' }));
}

async function entries(c: Etcd3, k: string): Promise<number> {
  const p = Buffer.from(entriesOf(`${prefix}:${k}`));
  return (await c.kv.range({ key: p, range_end: rangeEnd(p), keys_only: true })).kvs.length;
}

/** Nothing gets through and every connection is reset until `p` settles; then traffic passes again. */
async function failWhileCut(proxy: Proxy, p: Promise<unknown>): Promise<unknown> {
  const out: { done: boolean; v?: unknown } = { done: false };
  const settle = (v: unknown) => {
    out.done = true;
    out.v = v;
  };
  p.then(settle, settle);
  await expect
    .poll(
      () => {
        proxy.reset();
        return out.done;
      },
      { timeout: 15_000, interval: 50 },
    )
    .toBe(true);
  proxy.setMode({ kind: 'pass' });
  return out.v;
}

test('a release that fails without reaching etcd: the lock is freed once etcd answers again, not held until close()', async () => {
  const outsider = await clients.make();
  const { proxy, locks } = await behindProxy();
  const k = key();
  const lease = await locks.acquire(k);
  proxy.setMode({ kind: 'blackhole' });
  const failed = await failWhileCut(proxy, lease.release());
  expect(failed).toBeInstanceOf(BackendError); // the release never reached etcd
  // before the fix: the entry stayed under our live etcd lease, and the lock with it (30 s here,
  // for ever with a lease kept alive), though its ttl is 2 s and nobody held it any more
  await expect.poll(() => entries(outsider, k), { timeout: 20_000, interval: 100 }).toBe(0);
  const other = await direct();
  const next = await other.tryAcquire(k);
  expect(next).not.toBeNull();
  expect(next!.fence > lease.fence).toBe(true);
}, 60_000);

test("a waiter's leave that fails without reaching etcd: its place does not end up holding the lock once the holder releases", async () => {
  const outsider = await clients.make();
  const { proxy, locks } = await behindProxy();
  const other = await direct();
  const k = key();
  const held = await other.acquire(k);
  // the driver itself, so that the leave is the one call in flight
  const full = `${prefix}:${k}`;
  const token = 'a-waiter-token-of-this-test-0001';
  expect(await locks.backend.acquire(full, { token, ttlMs: 2000, queue: true })).toBeNull(); // queued
  expect(await entries(outsider, k)).toBe(2);
  proxy.setMode({ kind: 'blackhole' });
  const failed = await failWhileCut(proxy, locks.backend.leave!(full, token));
  expect(failed).toBeInstanceOf(Error); // the leave never reached etcd
  expect(await held.release()).toBe(true);
  // before the fix: the waiter's entry, which nobody would delete, was now the oldest, holding the
  // lock under our live etcd lease
  await expect.poll(() => entries(outsider, k), { timeout: 20_000, interval: 100 }).toBe(0);
  const next = await other.tryAcquire(k);
  expect(next).not.toBeNull();
}, 60_000);
