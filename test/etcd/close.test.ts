/**
 * close() of a fromUrl etcd backend while etcd is frozen (SIGSTOP): it awaited the lease's
 * revoke with no bound, so it never finished and the client fromUrl made was never closed. An
 * unrevoked lease ends by its TTL anyway: close() now waits for the revoke at most leaseTtl, and
 * fromUrl's wrapper closes its client after a bound even if the backend's close has not settled.
 * On an etcd member of this file's own.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { createLocks, fromUrl } from '../../src/index.js';
import { EtcdCluster } from '../support/etcd-cluster.js';
import { sleep, took } from '../support/until.js';

let member: EtcdCluster;

beforeAll(async () => {
  member = await EtcdCluster.start(1);
}, 60_000);
afterAll(async () => {
  member?.cont(0);
  await member?.stop();
});

/** Whether the member answers its health check within 300 ms. */
async function answers(host: string): Promise<boolean> {
  try {
    await fetch(`http://${host}/health`, { signal: AbortSignal.timeout(300) });
    return true;
  } catch {
    return false;
  }
}

async function until(what: string, ok: () => Promise<boolean>, ms = 5000): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await ok()) return;
    await sleep(25);
  }
  throw new Error(`timed out after ${ms}ms waiting for ${what}`);
}

test('etcd frozen: a fromUrl backend closes within leaseTtl (and its client with it)', async () => {
  const backend = await fromUrl(`etcd://${member.hosts[0]}?leaseTtl=2s`);
  const locks = createLocks(backend, { prefix: 'close', ttl: '2s', opTimeout: 1000 });
  const lease = await locks.acquire(`k-${process.pid}`);
  expect(lease.held).toBe(true);
  member.stopMember(0);
  try {
    await until('etcd to stop answering', async () => !(await answers(member.hosts[0]!)));
    // the revoke is given up after leaseTtl (2 s), then the client is closed
    const ms = await took(backend.close(), 15_000);
    expect(ms).toBeLessThan(2000 + 2000);
    expect(ms).toBeGreaterThan(1500); // it did wait for the revoke (etcd is frozen, not gone)
    await locks.close();
  } finally {
    member.cont(0);
  }
}, 40_000);
