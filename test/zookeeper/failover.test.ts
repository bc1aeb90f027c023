/**
 * ZooKeeper failover, on an ensemble this file owns (3 members on free ports): a member killed
 * under a holder, a holder process frozen past its session timeout, 20 waiters woken one at a
 * time (no herd), and a create whose reply is lost leaving no orphan node.
 */
import { spawn } from 'node:child_process';
import diagnostics from 'node:diagnostics_channel';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { connectZookeeper, type ZookeeperEvent } from '../../src/backends/zookeeper/index.js';
import { createLocks, LeaseLostError, type Lease, type Locks } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { haveZookeeper, startCluster, type ZkCluster } from '../support/zkserver.js';
import { Zk } from '../support/zookeeper.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const HOLDER = fileURLToPath(new URL('./holder.ts', import.meta.url));

async function until(what: string, ok: () => Promise<boolean> | boolean, ms = 10_000): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await ok()) return;
    await sleep(25);
  }
  throw new Error(`timed out after ${ms}ms waiting for ${what}`);
}

describe('zookeeper failover (own 3-member ensemble)', () => {
  let cluster: ZkCluster;
  let zk: Zk;
  const open: Locks[] = [];
  let n = 0;
  const key = () => `k${++n}-${process.pid}`;

  /** A lease's ttl may not exceed its session timeout: by default they are equal. */
  async function locks(hosts: string, sessionTimeout = 4000, ttl: number = sessionTimeout): Promise<Locks> {
    const backend = await connectZookeeper(hosts, { sessionTimeout });
    const l = createLocks(backend, { ttl, prefix: 'failover' });
    open.push(l);
    return l;
  }

  beforeAll(async () => {
    if (!haveZookeeper()) throw new Error('ZooKeeper is not installed (run scripts/services.sh)');
    cluster = await startCluster(3, 200);
    zk = new Zk(cluster.hosts);
  }, 60_000);

  afterAll(async () => {
    await Promise.allSettled(open.map((l) => l.close()));
    await zk?.closeAll();
    await cluster?.destroy();
  }, 30_000);

  test('the member a holder is connected to is killed: the lease survives on another member, never two holders', async () => {
    const k = key();
    const a = await locks(cluster.hosts);
    const b = await locks(cluster.hosts);
    const lease = await a.acquire(k);
    const session = (a.backend as unknown as { sessionId: string }).sessionId;
    const member = await cluster.memberOf(session);
    expect(member).toBeGreaterThanOrEqual(0);
    await cluster.servers[member]!.kill();
    let overlap = false;
    let other: Lease | null = null;
    const end = performance.now() + 6000; // past the session timeout (4s)
    while (performance.now() < end && !other) {
      other = await b.tryAcquire(k).catch(() => null);
      if (other && lease.held) overlap = true;
      await sleep(100);
    }
    expect(overlap).toBe(false);
    if (lease.held) {
      // the session moved to a live member within its timeout: still ours, still renewable
      expect(other).toBeNull();
      expect(await cluster.memberOf(session)).not.toBe(member);
      await lease.extend();
      expect(lease.held).toBe(true);
    } else {
      expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
    }
    await cluster.heal();
  }, 60_000);

  test('a holder process frozen past its session timeout: the server expires it, the next holder gets a higher fence, the holder is told on resume', async () => {
    const k = key();
    const child = spawn(process.execPath, ['--import', 'tsx', HOLDER, cluster.hosts, k, '3000', '3000'], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const lines: Array<Record<string, unknown>> = [];
    createInterface({ input: child.stdout! }).on('line', (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    try {
      await until('the holder to be granted', () => lines.some((l) => l.kind === 'granted'), 30_000);
      const granted = lines.find((l) => l.kind === 'granted')!;
      process.kill(child.pid!, 'SIGSTOP');
      const frozenAt = performance.now();
      const b = await locks(cluster.hosts);
      const next = await b.acquire(k, { wait: '20s' });
      const took = performance.now() - frozenAt;
      expect(next.fence > BigInt(granted.fence as string)).toBe(true);
      expect(took).toBeGreaterThanOrEqual(1000); // not before the server expired the session
      process.kill(child.pid!, 'SIGCONT');
      await until('the resumed holder to report its lease lost', () => lines.some((l) => l.kind === 'lost'), 15_000);
      const lost = lines.find((l) => l.kind === 'lost')!;
      expect(lost.reason).toBe('LeaseLostError');
      expect(lost.held).toBe(false);
      expect(next.held).toBe(true);
      await next.release();
    } finally {
      try {
        process.kill(child.pid!, 'SIGCONT');
      } catch {
        /* gone */
      }
      child.kill('SIGKILL');
    }
  }, 90_000);

  test('20 waiters on one key: each release wakes exactly one waiter (one watch event), in arrival order', async () => {
    const k = key();
    const events: ZookeeperEvent[] = [];
    const onEvent = (m: unknown) => {
      const e = m as ZookeeperEvent;
      if (e.type === 'watch') events.push(e);
    };
    const holder = await locks(cluster.hosts, 30_000);
    const waiters = await Promise.all(Array.from({ length: 20 }, () => locks(cluster.hosts, 30_000)));
    const first = await holder.acquire(k);
    diagnostics.subscribe('leasehold:zookeeper', onEvent);
    try {
      const order: number[] = [];
      const done: Promise<void>[] = [];
      for (const [i, w] of waiters.entries()) {
        const run = w.withLock(
          k,
          async () => {
            order.push(i);
            await sleep(5);
          },
          { wait: '60s' },
        );
        run.catch(() => {}); // may reject before it is awaited below
        done.push(run);
        // in line before the next one joins
        await until(`waiter ${i} in line`, async () => (await zk.lockNodes(`failover:${k}`)).length === i + 2);
      }
      expect(events).toHaveLength(0); // nobody woke while the holder held
      await first.release();
      await Promise.all(done);
      expect(order).toEqual(Array.from({ length: 20 }, (_, i) => i));
      // 21 releases; the last one has no successor: 20 wake-ups, one per release, no herd
      const predecessor = events.filter((e) => e.watch === 'predecessor');
      expect(predecessor).toHaveLength(20);
      expect(events).toHaveLength(20);
      expect(await zk.lockNodes(`failover:${k}`)).toEqual([]);
    } finally {
      diagnostics.unsubscribe('leasehold:zookeeper', onEvent);
    }
  }, 120_000);

  describe('a create whose reply is lost (connection reset through a TCP proxy)', () => {
    let proxy: Proxy;
    beforeAll(async () => {
      proxy = new Proxy(cluster.servers[0]!.port);
      await proxy.listen();
    });
    afterAll(async () => {
      await proxy.close();
    });

    /**
     * Another process holds `k` (so its directory exists and our create makes a waiter); our
     * create reaches the server while its reply is held, then the connection is reset.
     */
    async function loseReplyOf(
      k: string,
      start: (l: Locks) => Promise<unknown>,
    ): Promise<{ l: Locks; holder: Lease; r: Promise<unknown> }> {
      await cluster.heal();
      const holder = await (await locks(cluster.hosts)).acquire(k);
      const l = await locks(`127.0.0.1:${proxy.port}`, 6000);
      proxy.setMode({ kind: 'hold' }); // requests reach the server; replies are held
      const r = start(l).then(
        (x) => x,
        (e: unknown) => e,
      );
      try {
        await until('the create to reach the server', async () => (await zk.lockNodes(`failover:${k}`)).length === 2);
      } finally {
        proxy.reset(); // the held reply is dropped with the connection
        proxy.setMode({ kind: 'pass' });
      }
      return { l, holder, r };
    }

    test('the caller still waiting: its node is found again by its protection id and kept as its place', async () => {
      const k = key();
      const { holder, r } = await loseReplyOf(k, (l) => l.acquire(k, { wait: '20s' }));
      // still in line behind the holder, with the one node it created (not a second one)
      await sleep(500);
      expect(await zk.lockNodes(`failover:${k}`)).toHaveLength(2);
      await holder.release();
      const lease = (await r) as Lease;
      expect(lease).toHaveProperty('fence');
      expect(lease.fence > holder.fence).toBe(true);
      expect(await zk.lockNodes(`failover:${k}`)).toHaveLength(1);
      expect(await lease.release()).toBe(true);
      expect(await zk.lockNodes(`failover:${k}`)).toEqual([]);
    }, 60_000);

    test('the caller gave up meanwhile: no orphan node is left to block the key', async () => {
      const k = key();
      const { l, holder, r } = await loseReplyOf(k, (x) => x.acquire(k, { signal: AbortSignal.timeout(300) }));
      expect(((await r) as Error).name).toBe('TimeoutError');
      // the acquirer's session lives on (it is not closed); its lost create must not stay in line
      await until('the orphan to go', async () => (await zk.lockNodes(`failover:${k}`)).length === 1, 15_000);
      await holder.release();
      const other = await locks(cluster.hosts);
      const t0 = performance.now();
      const lease = await other.acquire(k, { wait: '5s' });
      expect(performance.now() - t0).toBeLessThan(3000);
      await lease.release();
      expect(await zk.lockNodes(`failover:${k}`)).toEqual([]);
      await l.close();
    }, 60_000);
  });
});
