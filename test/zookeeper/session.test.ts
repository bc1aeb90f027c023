/**
 * Session states (Curator's): a black-holed connection is dropped by the adapter's read watchdog
 * (SUSPENDED) and, without a server to say so, timed out to LOST; leases are signalled. The ttl
 * of a lease may not exceed the session timeout.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterEach, describe, expect, test } from 'vitest';
import { connectZookeeper, type ZookeeperEvent } from '../../src/backends/zookeeper/index.js';
import { createLocks, InvalidArgumentError, LeaseLostError, type Locks } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { Zk, ZK_HOSTS } from '../support/zookeeper.js';

const port = Number(ZK_HOSTS.split(',')[0]!.split(':')[1] ?? 2181);
const zk = new Zk();
const open: Locks[] = [];
const proxies: Proxy[] = [];

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await Promise.allSettled(proxies.splice(0).map((p) => p.close()));
  await zk.closeAll();
});

async function behindProxy(opts: { suspendedIsLost?: boolean } = {}) {
  const proxy = new Proxy(port);
  proxies.push(proxy);
  await proxy.listen();
  const backend = await connectZookeeper(`127.0.0.1:${proxy.port}`, { sessionTimeout: 2000, ...opts });
  const locks = createLocks(backend, { ttl: 2000, prefix: 'session' });
  open.push(locks);
  return { proxy, locks };
}

function record(): { states: string[]; stop(): void } {
  const states: string[] = [];
  const on = (m: unknown) => {
    const e = m as ZookeeperEvent;
    if (e.type !== 'watch') states.push(e.type);
  };
  diagnostics.subscribe('leasehold:zookeeper', on);
  return { states, stop: () => diagnostics.unsubscribe('leasehold:zookeeper', on) };
}

describe('zookeeper sessions', () => {
  test('a silent connection goes SUSPENDED (read watchdog), then LOST after the session timeout; the lease is signalled', async () => {
    const { proxy, locks } = await behindProxy();
    const lease = await locks.acquire(`k-${process.pid}-1`);
    const rec = record();
    try {
      const t0 = performance.now();
      proxy.setMode({ kind: 'blackhole' });
      await new Promise((r) => lease.signal.addEventListener('abort', r, { once: true }));
      expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
      expect(performance.now() - t0).toBeLessThan(2000 + 1500); // by its validity at the latest
      const until = performance.now() + 8000;
      while (!rec.states.includes('LOST') && performance.now() < until) await new Promise((r) => setTimeout(r, 50));
      expect(rec.states).toContain('SUSPENDED');
      expect(rec.states.indexOf('LOST')).toBeGreaterThan(rec.states.indexOf('SUSPENDED'));
    } finally {
      rec.stop();
    }
  }, 30_000);

  test('suspendedIsLost: the lease is signalled at SUSPENDED', async () => {
    const { proxy, locks } = await behindProxy({ suspendedIsLost: true });
    const lease = await locks.acquire(`k-${process.pid}-2`);
    const rec = record();
    try {
      proxy.setMode({ kind: 'blackhole' });
      await new Promise((r) => lease.signal.addEventListener('abort', r, { once: true }));
      expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
      expect(rec.states).toContain('SUSPENDED');
    } finally {
      rec.stop();
    }
  }, 30_000);

  test('a ttl longer than the session timeout is refused before anything is written', async () => {
    const backend = await zk.backend({ sessionTimeout: 5000 });
    const locks = createLocks(backend, { prefix: 'session' });
    open.push(locks);
    const k = `k-${process.pid}-3`;
    await expect(locks.acquire(k, { ttl: '30s' })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await zk.lockNodes(`session:${k}`)).toEqual([]);
    const lease = await locks.acquire(k, { ttl: '5s' });
    expect(lease.held).toBe(true);
  });
});
