/**
 * The fair queue (issue #17): waiters from other processes wait in the server's own lock queue.
 * Real processes on the real server: grants go in arrival order, each handoff wakes only the
 * next process (one answer, no NOTIFY), and a SIGKILLed waiter's place lapses at once.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, test } from 'vitest';
import { advisoryKey, lockParts } from '../../src/backends/postgres/index.js';
import { createLocks } from '../../src/index.js';
import { Pg, PG_URL } from './support.js';

const env = new Pg();
const WORKER = fileURLToPath(new URL('./queue-worker.ts', import.meta.url));
const children: ChildProcess[] = [];
afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await env.closeAll();
});

interface Done {
  granted: number;
  fence: string;
  released: number;
  stats: { queueGrants: number; notifications: number };
}

/** A waiting process: `ready` once its backend is open, `done` with what it got. */
function worker(prefix: string, key: string, holdMs: number) {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER, PG_URL, prefix, key, String(holdMs)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  let onReady = () => {};
  const ready = new Promise<void>((r) => (onReady = r));
  const done = new Promise<Done>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = JSON.parse(line) as { ready?: boolean } & Done;
      if (m.ready) onReady();
      else resolve(m);
    });
    child.on('exit', (code) => reject(new Error(`worker exited with ${code}`)));
  });
  done.catch(() => {});
  return { child, ready, done };
}

/** Sessions waiting (not granted) for the advisory lock of a namespaced key. */
async function waiting(fullKey: string): Promise<number> {
  const { classid, objid } = lockParts(advisoryKey(fullKey));
  const r = await (
    await env.admin()
  ).query(
    `select count(*)::int as n from pg_locks where locktype = 'advisory' and classid = $1::int8::oid
       and objid = $2::int8::oid and objsubid = 1 and not granted`,
    [classid, objid],
  );
  return r.rows[0].n;
}

async function until(what: string, ok: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await ok())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('8 processes on one key: grants in arrival order, one wake-up per handoff, no NOTIFY', async () => {
  const prefix = `q-${randomUUID().slice(0, 8)}`;
  const holder = createLocks(await env.backend('pg'), { prefix, ttl: '60s' });
  const lease = await holder.acquire('job');
  const procs = [];
  for (let i = 0; i < 8; i++) {
    const w = worker(prefix, 'job', 5);
    await w.ready;
    // arrival: the next process starts waiting only once this one is in the server's queue
    await until(`waiter ${i} queued`, async () => (await waiting(`${prefix}:job`)) === i + 1);
    procs.push(w);
  }
  await lease.release();
  const done = await Promise.all(procs.map((p) => p.done));
  const byFence = done.map((d, i) => ({ i, fence: BigInt(d.fence) })).sort((a, b) => (a.fence < b.fence ? -1 : 1));
  expect(byFence.map((x) => x.i)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]); // 100 % in arrival order
  for (let i = 1; i < 8; i++) expect(done[i]!.granted).toBeGreaterThanOrEqual(done[i - 1]!.granted);
  expect(byFence[0]!.fence > lease.fence).toBe(true);
  // each process was woken once, by the answer to its own wait; none received a NOTIFY
  for (const d of done) expect(d.stats).toEqual({ queueGrants: 1, notifications: 0 });
  await holder.close();
}, 120_000);

test('a SIGKILLed waiter at the head of the queue delays the next grant by far less than a second', async () => {
  const prefix = `q-${randomUUID().slice(0, 8)}`;
  const holder = createLocks(await env.backend('pg'), { prefix, ttl: '60s' });
  const lease = await holder.acquire('job');
  const head = worker(prefix, 'job', 5);
  await head.ready;
  await until('the head queued', async () => (await waiting(`${prefix}:job`)) === 1);
  const next = worker(prefix, 'job', 5);
  await next.ready;
  await until('the next queued', async () => (await waiting(`${prefix}:job`)) === 2);
  head.child.kill('SIGKILL');
  await new Promise((r) => head.child.once('exit', r));
  const released = Date.now();
  await lease.release();
  const d = await next.done;
  const delay = d.granted - released;
  console.log(`[postgres] next grant ${delay} ms after the release, past a SIGKILLed head`);
  expect(delay).toBeLessThan(1000);
  expect(BigInt(d.fence) > lease.fence).toBe(true);
  await holder.close();
}, 60_000);
