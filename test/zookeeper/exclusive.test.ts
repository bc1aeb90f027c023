/**
 * runExclusive's lockAtLeastFor on ZooKeeper: the lock is kept as a stored window (the key's
 * window node), and the holder's ephemeral node goes. Before, the node stayed for as long as the
 * holder's session lived: an open Locks (or a killed process, until the server expired its
 * session) kept the lock past lockAtMostFor.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, test } from 'vitest';
import { createLocks, type Locks } from '../../src/index.js';
import { Zk, ZK_HOSTS } from '../support/zookeeper.js';

const CHILD = fileURLToPath(new URL('./exclusive-child.ts', import.meta.url));
const zk = new Zk();
const open: Locks[] = [];
const key = () => `x-${process.pid}-${randomUUID().slice(0, 8)}`;

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await zk.closeAll();
});

async function locks(): Promise<Locks> {
  const l = createLocks(await zk.backend({ sessionTimeout: 10_000 }), { prefix: 'exclusive', ttl: '10s' });
  open.push(l);
  return l;
}

describe('zookeeper: runExclusive lockAtLeastFor', () => {
  test('another session gets the lock after lockAtLeastFor while the first Locks stays open', async () => {
    const k = key();
    const a = await locks();
    const b = await locks();
    // the window runs from the grant's send: stamped before the call, so a late reply or a slow
    // start of fn on a loaded machine cannot make the window look short
    const asked = performance.now();
    const r = await a.runExclusive(k, () => undefined, {
      lockAtLeastFor: '2500ms',
      lockAtMostFor: '5s',
    });
    expect(r).toEqual({ ran: true, value: undefined });
    // within the window: skipped, and inspect shows the window
    expect(await b.runExclusive(k, () => 'b')).toEqual({ ran: false });
    const info = await b.inspect(k);
    expect(info?.remainingMs).toBeGreaterThan(1000);
    expect(info?.remainingMs).toBeLessThanOrEqual(2600);
    const lease = await b.acquire(k, { wait: '8s' });
    const after = performance.now() - asked;
    expect(after).toBeGreaterThanOrEqual(2490); // never before lockAtLeastFor (clock granularity)
    expect(after).toBeLessThan(5000); // never after lockAtMostFor
    expect(lease.fence).toBeGreaterThan(info!.fence);
    await lease.release();
    expect(await a.inspect(k)).toBeNull();
  }, 20_000);

  test('the window outlives a holder killed during it, and ends at lockAtLeastFor, not at its session timeout', async () => {
    const k = key();
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, ZK_HOSTS, k, '10000', '2500', '5000'], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once('line', resolve);
        child.once('exit', (code) => reject(new Error(`the child exited (${code}) before runExclusive returned`)));
      });
      const { ran, asked } = JSON.parse(line) as { ran: boolean; asked: number };
      expect(ran).toBe(true);
      child.kill('SIGKILL'); // its session lives on for 10 s: the old ephemeral node would too
      const b = await locks();
      expect(await b.runExclusive(k, () => 'b')).toEqual({ ran: false });
      const lease = await b.acquire(k, { wait: '12s' });
      const after = Date.now() - asked;
      expect(after).toBeGreaterThanOrEqual(2490); // never before lockAtLeastFor (clock granularity)
      expect(after).toBeLessThan(5000);
      await lease.release();
    } finally {
      child.kill('SIGKILL');
    }
  }, 30_000);
});
