/**
 * A runExclusive window (lockAtLeastFor) against a caller already waiting in the server's lock
 * queue: the waiter's blocking statement took its snapshot before the holder wrote the window,
 * so the window must be checked again after the wait, not with that statement's snapshot.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { createLocks } from '../../src/index.js';
import { KINDS, Pg } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());

const uid = () => randomUUID().slice(0, 8);

describe.each(KINDS)('%s', (kind) => {
  test("a caller queued in the server while the holder runs gets the key only after the holder's lockAtLeastFor window", async () => {
    const prefix = `lh-${uid()}`;
    const a = createLocks(await env.backend(kind), { prefix, ttl: '30s' });
    const b = createLocks(await env.backend(kind), { prefix, ttl: '30s' });
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
    // b's attempt was refused and it now waits in the server's lock queue
    expect(await env.waiter(`${prefix}:job`)).toBeDefined();
    finish();
    // a stored its window (until ≥ t0 + 3 s) and let go of the live lock: b's wait is granted now
    expect(await ran).toEqual({ ran: true, value: 'ran' });
    const lease = await waiting;
    const at = performance.now() - t0;
    console.log(`[${kind}] the queued caller got the key ${at.toFixed(0)} ms after the window began (3000 ms)`);
    expect(at).toBeGreaterThanOrEqual(2950);
    expect(lease.held).toBe(true);
    await lease.release();
    // the queue still works after a window: a second waiter is handed the key on release
    const first = await b.acquire('job');
    const next = a.acquire('job', { wait: '10s' });
    next.catch(() => {}); // awaited below
    expect(await env.waiter(`${prefix}:job`)).toBeDefined();
    await first.release();
    const second = await next;
    expect(second.fence > first.fence).toBe(true);
    await second.release();
    await Promise.all([a.close(), b.close()]);
  });
});
