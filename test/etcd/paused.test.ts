/**
 * A holder paused (SIGSTOP) past its etcd lease, with a lock ttl longer than the lease: the
 * server frees the lock after the lease's TTL and another process is granted it. When the holder
 * resumes, whatever it reads first — `held`, `remaining()`, `signal` — must say the lease is gone,
 * before any timer of the driver ran: a lease is never valid past what its etcd lease guarantees.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, expect, test } from 'vitest';
import { etcd } from '../../src/backends/etcd/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { ETCD_HOSTS, EtcdClients } from '../support/etcd.js';

const CHILD = fileURLToPath(new URL('./paused-holder-child.ts', import.meta.url));
const clients = new EtcdClients();
const open: Locks[] = [];
const prefix = `lh-paused-${process.pid}-${Date.now().toString(36)}`;
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

test('a holder paused past its 2 s etcd lease (ttl 10 s) reads held false, remaining 0 and an aborted signal at once when resumed', async () => {
  const k = 'k1';
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
    env: { ...process.env, HOSTS: ETCD_HOSTS.join(','), KEY: k, PREFIX: prefix },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (l) => lines.push(l));
  const exited = new Promise((r) => child.once('exit', r));
  try {
    await expect.poll(() => lines.find((l) => l.startsWith('held ')), { timeout: 20_000 }).toBeDefined();
    const held = BigInt(lines.find((l) => l.startsWith('held '))!.split(' ')[1]!);
    child.kill('SIGSTOP');
    const locks = createLocks(etcd(await clients.make(), { leaseTtl: '2s' }), { prefix, ttl: '10s' });
    open.push(locks);
    // granted once etcd ends the paused holder's lease (2 s after its last keep-alive)
    const mine = await locks.acquire(k, { wait: '8s' });
    expect(mine.fence > held).toBe(true);
    const before = lines.length;
    child.kill('SIGCONT');
    await expect
      .poll(() => lines.slice(before).find((l) => l.startsWith('resumed ')), { timeout: 10_000 })
      .toBeDefined();
    // before the fix: "resumed held=true remaining=~7000 aborted=false" while we hold the lock
    expect(lines.slice(before).find((l) => l.startsWith('resumed '))).toBe(
      'resumed held=false remaining=0 aborted=true',
    );
    expect(mine.held).toBe(true);
    await exited;
  } finally {
    child.kill('SIGKILL');
  }
}, 40_000);
