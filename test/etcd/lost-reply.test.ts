/**
 * A reply lost on the way back: the client talks to a real etcd through a TCP proxy that passes
 * requests on but holds the replies; once the request has reached etcd (an outsider sees its
 * effect), the proxy resets every connection and passes traffic again. etcd3 sees UNAVAILABLE and
 * sends the same request again (its retry policy), so the retry meets the first send's effect.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import type { Etcd3 } from 'etcd3';
import { etcd } from '../../src/backends/etcd/index.js';
import { entriesOf, rangeEnd } from '../../src/backends/etcd/keys.js';
import { createLocks, type WarningEvent } from '../../src/index.js';
import type { Proxy } from '../faults/proxy.js';
import { EtcdClients } from '../support/etcd.js';
import { EtcdBehindProxy } from '../support/etcd-proxy.js';

const clients = new EtcdClients();
const prefix = `lh-lostreply-${process.pid}-${Date.now().toString(36)}`;
const proxied = new EtcdBehindProxy(clients, prefix);
const key = () => proxied.key();

afterEach(() => proxied.closeAll());
afterAll(() => clients.closeAll());

/** A Locks whose etcd client goes through a proxy, with its etcd lease already granted. */
const behindProxy = () => proxied.make();

/** The entries of lock `k` as an outsider sees them: etcd keys, oldest first. */
async function entries(c: Etcd3, k: string): Promise<{ key: string; rev: bigint }[]> {
  const p = Buffer.from(entriesOf(`${prefix}:${k}`));
  const r = await c.kv.range({ key: p, range_end: rangeEnd(p), sort_target: 'Create', sort_order: 'Ascend' });
  return r.kvs.map((kv) => ({ key: kv.key.toString(), rev: BigInt(kv.create_revision) }));
}

/** Holds the replies until the request has reached etcd (`reached()`), then resets and passes. */
async function loseReply(proxy: Proxy, reached: () => Promise<boolean>): Promise<void> {
  await expect.poll(reached, { timeout: 5000, interval: 20 }).toBe(true);
  proxy.reset(); // the held reply is dropped with its connection
  proxy.setMode({ kind: 'pass' });
}

describe('etcd: a reply lost and the call retried by etcd3', () => {
  test('tryAcquire whose reply is lost: the key ends up granted to us, never held by an orphan entry', async () => {
    const outsider = await clients.make();
    const { proxy, locks } = await behindProxy();
    const k = key();
    proxy.setMode({ kind: 'hold' });
    const attempt = locks.tryAcquire(k);
    await loseReply(proxy, async () => (await entries(outsider, k)).length === 1);
    const lease = await attempt;
    const stored = await entries(outsider, k);
    // before the fix: null, with our own entry left behind under our live etcd lease
    expect(lease).not.toBeNull();
    expect(stored).toHaveLength(1);
    expect(lease!.fence).toBe(stored[0]!.rev);
    expect(lease!.held).toBe(true);
    // it is really ours: another Locks is refused, and our release frees it for the other
    const other = createLocks(etcd(await clients.make()), { prefix });
    proxied.track(other);
    expect(await other.tryAcquire(k)).toBeNull();
    expect(await lease!.release()).toBe(true);
    expect(await entries(outsider, k)).toEqual([]);
    const next = await other.tryAcquire(k);
    expect(next).not.toBeNull();
    expect(next!.fence > lease!.fence).toBe(true);
  });

  test('runExclusive whose grant reply is lost runs fn, and frees the key after it', async () => {
    const outsider = await clients.make();
    const { proxy, locks } = await behindProxy();
    const k = key();
    proxy.setMode({ kind: 'hold' });
    const run = locks.runExclusive(k, async () => 'ran');
    await loseReply(proxy, async () => (await entries(outsider, k)).length === 1);
    // before the fix: { ran: false }, and the key stays blocked by our own entry until close()
    expect(await run).toEqual({ ran: true, value: 'ran' });
    expect(await entries(outsider, k)).toEqual([]);
  });

  test('release whose reply is lost: true, the lock was ours and is freed', async () => {
    const outsider = await clients.make();
    const { proxy, locks } = await behindProxy();
    const k = key();
    const lease = await locks.acquire(k);
    expect(await entries(outsider, k)).toHaveLength(1);
    proxy.setMode({ kind: 'hold' });
    const released = lease.release();
    await loseReply(proxy, async () => (await entries(outsider, k)).length === 0);
    // before the fix: false (the retry found the entry gone), for a lease that was ours to the end
    expect(await released).toBe(true);
    expect(await entries(outsider, k)).toEqual([]);
  });

  test('tryAcquire that fails after its put reached etcd (every send reset): the entry it may have left is deleted', async () => {
    const outsider = await clients.make();
    const { proxy, locks } = await behindProxy();
    const k = key();
    proxy.setMode({ kind: 'hold' });
    const attempt = locks.tryAcquire(k).then(
      () => 'settled',
      (e: unknown) => e,
    );
    await expect.poll(async () => (await entries(outsider, k)).length, { timeout: 5000, interval: 20 }).toBe(1);
    // every send of the call (etcd3 tries three times) loses its connection before its reply
    let failure: unknown = null;
    void attempt.then((r) => (failure = r));
    await expect
      .poll(
        () => {
          proxy.reset();
          return failure;
        },
        { timeout: 10_000, interval: 50 },
      )
      .not.toBeNull();
    proxy.setMode({ kind: 'pass' });
    expect(failure).toBeInstanceOf(Error);
    // before the fix: our entry stayed under our live etcd lease, blocking the key until close();
    // now it is deleted once etcd answers again (etcd3's circuit breaker may hold calls for 5 s)
    await expect.poll(async () => (await entries(outsider, k)).length, { timeout: 15_000, interval: 100 }).toBe(0);
    const lease = await locks.tryAcquire(k);
    expect(lease).not.toBeNull();
    expect(await lease!.release()).toBe(true);
  });

  test('a waiting acquire whose first attempt fails after its put reached etcd is granted; the entry of the failed attempt does not stay ahead of it', async () => {
    const outsider = await clients.make();
    const { proxy, locks } = await behindProxy();
    const k = key();
    proxy.setMode({ kind: 'hold' });
    const acquired = locks.acquire(k, { wait: '20s' });
    acquired.catch(() => {});
    await expect.poll(async () => (await entries(outsider, k)).length, { timeout: 5000, interval: 20 }).toBe(1);
    // every send of the first attempt loses its connection before its reply, until it fails
    const failures: string[] = [];
    const onWarning = (m: unknown) => {
      if ((m as WarningEvent).code === 'LEASEHOLD_BACKEND_FAILING') failures.push((m as WarningEvent).message);
    };
    subscribe('leasehold:warning', onWarning);
    try {
      await expect
        .poll(
          () => {
            proxy.reset();
            return failures.length;
          },
          { timeout: 10_000, interval: 50 },
        )
        .toBeGreaterThan(0);
    } finally {
      unsubscribe('leasehold:warning', onWarning);
    }
    proxy.setMode({ kind: 'pass' });
    // before the fix: the failed attempt's entry stayed ahead of the new one (the holder, never released) and the wait timed out
    const lease = await acquired;
    const stored = await entries(outsider, k);
    expect(stored.map((e) => e.rev)).toEqual([lease.fence]);
    expect(await lease.release()).toBe(true);
  }, 40_000);
});
