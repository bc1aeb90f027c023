/**
 * Two waiters on one key in one backend (two Locks on the same `ZookeeperBackend`): each wait
 * must watch the predecessor of the front-most of them, not of whichever was queued last.
 *
 * On the old code `waitForChange` took the last of the backend's waiters on the key: the front
 * waiter, once its predecessor left out of order and it waited again, watched its own node
 * (the predecessor of the waiter behind it), so the holder's release woke nobody and the front
 * waiter slept out its whole bound (ttl / 3: 10 s at the default ttl) before it took the lock.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { createLocks, type Locks } from '../../src/index.js';
import { sleep, took, until } from '../support/until.js';
import { Zk } from '../support/zookeeper.js';

const zk = new Zk();
const open: Locks[] = [];
const prefix = 'shared-waiters';

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await zk.closeAll();
});

async function locksOn(backend?: Awaited<ReturnType<Zk['backend']>>): Promise<Locks> {
  const l = createLocks(backend ?? (await zk.backend()), { ttl: '30s', prefix });
  open.push(l);
  return l;
}

describe('zookeeper: waiters of two Locks on one backend', () => {
  test('a predecessor leaving out of order, then the release, wakes the front waiter at once', async () => {
    const holderLocks = await locksOn();
    const quitterLocks = await locksOn();
    const shared = await zk.backend();
    const first = await locksOn(shared);
    const second = await locksOn(shared);
    const k = `k-${process.pid}-1`;
    const nodes = () => zk.lockNodes(`${prefix}:${k}`);

    const holder = await holderLocks.acquire(k);
    const quit = new AbortController();
    const quitter = quitterLocks.acquire(k, { signal: quit.signal }).catch(() => null);
    await until('the quitter in line', async () => (await nodes()).length === 2, 5000);
    const front = first.acquire(k);
    front.catch(() => {}); // awaited below; closed by afterEach if the test fails first
    await until('the front waiter in line', async () => (await nodes()).length === 3, 5000);
    const back = second.acquire(k);
    back.catch(() => {});
    await until('the back waiter in line', async () => (await nodes()).length === 4, 5000);

    quit.abort(); // the front waiter's predecessor leaves: it wakes, tries, and waits again
    expect(await quitter).toBeNull();
    await until('the quitter gone', async () => (await nodes()).length === 3, 5000);
    await sleep(500); // the front waiter's new wait is in place (the fix does not depend on it)

    await holder.release();
    const ms = await took(front, 3000);
    expect(ms).toBeLessThan(3000);
    const lease = await front;
    await lease.release();
    expect(await took(back, 3000)).toBeLessThan(3000);
    await (await back).release();
  }, 30_000);
});
