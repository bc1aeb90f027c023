/**
 * etcd on a 3-member cluster this test owns (its own processes and ports: members are killed
 * and restarted here). etcd3 sends each call (and each new keep-alive stream) to a member picked
 * at random from its list; killing each member in turn therefore kills the one the client talks
 * to (its keep-alive stream's member among them).
 */
import { spawn } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { Etcd3 } from 'etcd3';
import type { Backend } from '../../src/backend.js';
import { etcd, type EtcdBackend } from '../../src/backends/etcd/index.js';
import { entriesOf, rangeEnd } from '../../src/backends/etcd/keys.js';
import { createLocks, type Lease, type Locks, type LocksOptions, type WarningEvent } from '../../src/index.js';
import { EtcdCluster } from '../support/etcd-cluster.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const abortedAt = (signal: AbortSignal) =>
  new Promise<number>((r) => {
    if (signal.aborted) return r(performance.now());
    signal.addEventListener('abort', () => r(performance.now()), { once: true });
  });

const CHILD = fileURLToPath(new URL('./waiter-child.ts', import.meta.url));
let cluster: EtcdCluster;
const clients: Etcd3[] = [];
const open: Locks[] = [];
let n = 0;
const key = () => `fo${++n}-${Math.random().toString(36).slice(2, 8)}`;
const prefix = 'lh-failover';

beforeAll(async () => {
  cluster = await EtcdCluster.start(3);
}, 60_000);
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  for (const c of clients.splice(0)) c.close();
  await cluster?.stop();
});

/** A client of the cluster: its members listed from `first` on (etcd3 picks among them at random). */
function client(first: number): Etcd3 {
  const hosts = cluster.hosts.slice(first).concat(cluster.hosts.slice(0, first));
  const c = new Etcd3({ hosts: hosts.map((h) => `http://${h}`), dialTimeout: 1000 });
  clients.push(c);
  return c;
}

function locks(b: Backend, o: LocksOptions = {}): Locks {
  const l = createLocks(b, { prefix, ...o });
  open.push(l);
  return l;
}

/** The holder's entry of `k` as an outsider sees it: its etcd key and lease id (hex, as etcdctl wants it). */
async function holderEntry(c: Etcd3, k: string): Promise<{ key: string; leaseHex: string } | null> {
  const p = Buffer.from(entriesOf(`${prefix}:${k}`));
  const r = await c.kv.range({ key: p, range_end: rangeEnd(p), sort_target: 'Create', sort_order: 'Ascend', limit: 1 });
  const kv = r.kvs[0];
  return kv ? { key: kv.key.toString(), leaseHex: BigInt(kv.lease).toString(16) } : null;
}

describe('etcd failover (3 members)', () => {
  test('the member the holder talks to is killed: its lease survives (the client fails over) or is reported lost — never two holders', async () => {
    const outcomes: string[] = [];
    for (const victim of [0, 1, 2]) {
      const k = key();
      const holder = locks(etcd(client(victim), { leaseTtl: '5s' }), { ttl: '10s' });
      const rival = locks(etcd(client((victim + 1) % 3), { leaseTtl: '5s' }), { ttl: '10s' });
      const lease = await holder.acquire(k);
      let lostAt = Infinity;
      void abortedAt(lease.signal).then((t) => (lostAt = t));
      await cluster.kill(victim);
      const killedAt = performance.now();
      let rivalGot: Lease | null = null;
      // a write sent while the cluster elects a new leader may hang for etcd's request timeout
      // (5s + 2 election timeouts = 7s): watch for 8s, and longer if the holder was told it lost
      while (
        !rivalGot &&
        (performance.now() - killedAt < 8000 || (!lease.held && performance.now() - killedAt < 30_000))
      ) {
        rivalGot = await rival.tryAcquire(k).catch(() => null);
        if (rivalGot) {
          const at = performance.now();
          // the holder knew it had lost the lock before anyone else got it
          expect(lease.held).toBe(false);
          expect(lostAt).toBeLessThan(at);
          expect(rivalGot.fence > lease.fence).toBe(true);
        } else await sleep(150);
      }
      outcomes.push(rivalGot ? `lost after ${Math.round(lostAt - killedAt)} ms, then taken over` : 'survived');
      if (!rivalGot) expect(lease.held).toBe(true); // the client failed over; nobody else got it
      await cluster.restart(victim);
      await rivalGot?.release();
      if (lease.held) expect(await lease.release()).toBe(true);
    }
    console.log(`etcd failover: member kills -> ${outcomes.join(', ')}`);
  }, 150_000);

  test('etcdctl lease revoke of the holder while another process waits: the holder is signalled within a keep-alive interval, the waiter gets a higher fence', async () => {
    const k = key();
    const outsider = client(0);
    // lease TTL 3s: keep-alive every 1s; the lock's own renewal (ttl 30s: every 10s) is not what notices
    const holder = locks(etcd(client(1), { leaseTtl: '3s' }), { ttl: '30s' });
    const waiter = locks(etcd(client(2), { leaseTtl: '3s' }), { ttl: '30s' });
    const lease = await holder.acquire(k);
    const waiting = waiter.acquire(k, { wait: '20s' });
    waiting.catch(() => {}); // may reject before it is awaited below
    // the waiter is queued: its entry is there behind the holder's
    const p = Buffer.from(entriesOf(`${prefix}:${k}`));
    await expect.poll(async () => (await outsider.kv.range({ key: p, range_end: rangeEnd(p) })).kvs.length).toBe(2);
    const entry = await holderEntry(outsider, k);
    const lost = abortedAt(lease.signal);
    const revokedAt = performance.now();
    cluster.etcdctl('lease', 'revoke', entry!.leaseHex);
    const next = await waiting;
    const signalledIn = (await lost) - revokedAt;
    expect(next.fence > lease.fence).toBe(true);
    expect(lease.held).toBe(false);
    expect(signalledIn).toBeLessThan(1000 + 500); // one keep-alive interval (TTL/3), plus slack
    expect(await lease.release()).toBe(false);
  }, 30_000);

  test('Jepsen etcd 3.4.3: a waiter whose lease expires while it waits never reports a grant on it; it waits on under a new entry', async () => {
    const k = key();
    const outsider = client(0);
    const holder = locks(etcd(client(1), { leaseTtl: '3s' }), { ttl: '30s' });
    // a long lease TTL: its keep-alive (every 10s) cannot notice the loss before the wake-up does
    const waiterBackend: EtcdBackend = etcd(client(2), { leaseTtl: '30s' });
    const waiter = locks(waiterBackend, { ttl: '30s' });
    const lease = await holder.acquire(k);
    const failures: string[] = [];
    const onWarning = (m: unknown) => {
      if ((m as WarningEvent).code === 'LEASEHOLD_BACKEND_FAILING') failures.push((m as WarningEvent).message);
    };
    subscribe('leasehold:warning', onWarning);
    try {
      let granted: Lease | null = null;
      // its outcome is read after the release below, and may come while that release is in flight:
      // a handler from the start, so an early rejection is not reported as unhandled
      const waiting = waiter.acquire(k, { wait: '20s' }).then(
        (l) => (granted = l),
        (e: unknown) => e,
      );
      const p = Buffer.from(entriesOf(`${prefix}:${k}`));
      const entries = async () =>
        (await outsider.kv.range({ key: p, range_end: rangeEnd(p), sort_target: 'Create', sort_order: 'Ascend' })).kvs;
      await expect.poll(async () => (await entries()).length).toBe(2);
      const revoked = (await entries())[1]!.lease;
      // the waiter's lease ends on the server (as if it had been paused past its TTL) ...
      cluster.etcdctl('lease', 'revoke', BigInt(revoked).toString(16));
      // ... and then the holder lets go: the waiter's watch fires, it re-reads its own entry, finds
      // it gone and reports no grant on it; the wait goes on under a new entry (a new lease), and
      // that one is granted, with a higher fence
      expect(await lease.release()).toBe(true);
      expect(await waiting).toBe(granted);
      expect(failures).toEqual([expect.stringMatching(/lease this waiter queued under ended/)]);
      expect(granted!.fence > lease.fence).toBe(true);
      const now = await entries();
      expect(now).toHaveLength(1);
      expect(now[0]!.lease).not.toBe(revoked);
      // nobody else can take it meanwhile
      const third = locks(etcd(client(0), { leaseTtl: '3s' }));
      expect(await third.tryAcquire(k)).toBeNull();
      await granted!.release();
      const l3 = await third.tryAcquire(k);
      expect(l3!.fence > granted!.fence).toBe(true);
    } finally {
      unsubscribe('leasehold:warning', onWarning);
    }
  }, 30_000);

  test('Jepsen etcd 3.4.3, as a paused process: a waiter SIGSTOPped past its lease TTL reports no grant on it, and is served after the next holder', async () => {
    const k = key();
    const holder = locks(etcd(client(0), { leaseTtl: '3s' }), { ttl: '30s' });
    const lease = await holder.acquire(k);
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
      env: { ...process.env, HOSTS: cluster.hosts.join(','), KEY: k, PREFIX: prefix },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines: string[] = [];
    createInterface({ input: child.stdout! }).on('line', (l) => lines.push(l));
    const exited = new Promise((r) => child.once('exit', r));
    try {
      await expect.poll(() => lines, { timeout: 30_000 }).toContain('queued');
      child.kill('SIGSTOP');
      // paused past its 2 s lease: etcd deletes its entry; meanwhile the holder hands over
      await sleep(3500);
      expect(await lease.release()).toBe(true);
      const third = locks(etcd(client(1), { leaseTtl: '3s' }), { ttl: '30s' });
      const l3 = await third.acquire(k, { wait: '5s' });
      child.kill('SIGCONT');
      // awake, it finds its entry gone: no grant on it; it queues again, behind the third
      await expect.poll(() => lines, { timeout: 10_000 }).toContainEqual(expect.stringMatching(/^attempt failed: /));
      await expect.poll(() => lines.filter((l) => l === 'queued').length, { timeout: 10_000 }).toBe(2);
      expect(lines.filter((l) => l.startsWith('granted'))).toEqual([]);
      expect(l3.held).toBe(true);
      expect(await l3.release()).toBe(true);
      await exited;
      const got = lines.find((l) => l.startsWith('granted'));
      expect(got).toBeDefined();
      expect(BigInt(got!.split(' ')[1]!) > l3.fence).toBe(true);
    } finally {
      child.kill('SIGKILL');
    }
  }, 60_000);

  test('20 waiters on one key: each release wakes exactly one (no herd), in arrival order', async () => {
    const k = key();
    const shared = client(0);
    const holder = locks(etcd(shared), { ttl: '30s' });
    const lease = await holder.acquire(k);
    const attempts: number[] = Array(20).fill(0);
    const order: number[] = [];
    const runs: Promise<void>[] = [];
    for (let i = 0; i < 20; i++) {
      const inner = etcd(shared);
      let refused!: () => void;
      const queued = new Promise<void>((r) => (refused = r));
      const counting: Backend = Object.create(inner, {
        acquire: {
          value: async (...args: Parameters<Backend['acquire']>) => {
            attempts[i]!++;
            const g = await inner.acquire(...args);
            if (!g) refused();
            return g;
          },
        },
      });
      // ttl 30s: a waiter's bounded re-check comes after 10s, so every attempt below is a wake-up
      const run = locks(counting, { ttl: '30s' }).withLock(k, () => void order.push(i), { wait: '25s' });
      run.catch(() => {}); // may reject before it is awaited below
      runs.push(run);
      await queued;
    }
    expect(attempts.every((a) => a === 1)).toBe(true);
    await lease.release();
    await Promise.all(runs);
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => i));
    // one refused attempt each, then exactly one more: the wake-up that granted it
    expect(attempts).toEqual(Array(20).fill(2));
  }, 30_000);
});
