/**
 * A runExclusive window (lockAtLeastFor) against a caller already waiting in the server's lock
 * queue (window-wait.test.ts, wait-function.test.ts).
 */
import { expect } from 'vitest';
import { advisoryKey, lockParts } from '../../src/backends/postgres/index.js';
import type { Locks } from '../../src/index.js';
import type { Pg } from './support.js';

/** The server pid waiting (not granted) for the lock of `fullKey` in `schema`, polled for ≤ 5 s. */
export async function queuedPid(env: Pg, fullKey: string, schema = 'public'): Promise<number> {
  const { classid, objid } = lockParts(advisoryKey(fullKey, schema));
  const admin = await env.admin();
  const until = performance.now() + 5000;
  for (;;) {
    const r = await admin.query(
      `select pid from pg_locks where locktype = 'advisory' and classid = $1::int8::oid
        and objid = $2::int8::oid and objsubid = 1 and not granted`,
      [classid, objid],
    );
    if (r.rows[0]) return Number(r.rows[0].pid);
    if (performance.now() > until) throw new Error(`nobody waits for ${fullKey}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * `a` runs a job with a 3 s lockAtLeastFor window while `b` waits for the key in the server's
 * queue: `b` must get it only after the window. Returns the waiter's server pid.
 */
export async function windowAgainstQueued(
  env: Pg,
  a: Locks,
  b: Locks,
  fullKey: string,
  schema?: string,
): Promise<number> {
  let finish!: () => void;
  const gate = new Promise<void>((r) => (finish = r));
  let started!: () => void;
  const inside = new Promise<void>((r) => (started = r));
  const t0 = performance.now();
  const ran = a.runExclusive(
    'job',
    async () => {
      started();
      await gate;
      return 'ran';
    },
    { lockAtLeastFor: '3s', lockAtMostFor: '1m' },
  );
  await inside;
  const waiting = b.acquire('job', { wait: '20s' });
  waiting.catch(() => {}); // awaited below
  const pid = await queuedPid(env, fullKey, schema);
  finish();
  expect(await ran).toEqual({ ran: true, value: 'ran' });
  const lease = await waiting;
  expect(performance.now() - t0).toBeGreaterThanOrEqual(2950);
  expect(lease.held).toBe(true);
  await lease.release();
  return pid;
}
