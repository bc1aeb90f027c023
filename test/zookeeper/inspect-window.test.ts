/**
 * inspect() while a runExclusive window (lockAtLeastFor) holds the key and a waiter is queued:
 * the waiter's node is the lowest in line but does not hold the lock — the window does, until
 * its end. inspect (and so `leasehold status`, `leader()`, `observe()`) must show the window.
 *
 * On the old code inspect showed the lowest node whatever the window: the queued waiter, with its
 * own czxid as the fence and remainingMs -1, as if it held the lock.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { createLocks, type Locks } from '../../src/index.js';
import { until } from '../support/until.js';
import { Zk } from '../support/zookeeper.js';

const zk = new Zk();
const open: Locks[] = [];
const prefix = 'inspect-window';

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await zk.closeAll();
});

async function locks(): Promise<Locks> {
  const l = createLocks(await zk.backend(), { prefix });
  open.push(l);
  return l;
}

describe('zookeeper: inspect during a lockAtLeastFor window', () => {
  test('shows the window, not a waiter queued behind it', async () => {
    const a = await locks();
    const b = await locks();
    const k = `k-${process.pid}-1`;
    const r = await a.runExclusive(k, () => 'ran', { lockAtLeastFor: '4s' });
    expect(r.ran).toBe(true);
    const before = await a.inspect(k);
    expect(before).not.toBeNull();
    expect(before!.remainingMs).toBeGreaterThan(0);

    const waiting = b.acquire(k, { wait: '10s' });
    waiting.catch(() => {}); // awaited below; closed by afterEach if the test fails first
    await until('the waiter in line', async () => (await zk.lockNodes(`${prefix}:${k}`)).length === 1, 5000);
    const during = await a.inspect(k);
    expect(during?.fence).toBe(before!.fence);
    expect(during!.remainingMs).toBeGreaterThan(0);

    const lease = await waiting;
    expect(lease.fence).toBeGreaterThan(before!.fence);
    const after = await a.inspect(k);
    expect(after?.fence).toBe(lease.fence);
    await lease.release();
  }, 20_000);
});
