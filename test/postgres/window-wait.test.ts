/**
 * A runExclusive window (lockAtLeastFor) against a caller already waiting in the server's lock
 * queue: the waiter's blocking statement took its snapshot before the holder wrote the window,
 * so the window must be checked again after the wait, not with that statement's snapshot.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { createLocks } from '../../src/index.js';
import { KINDS, Pg } from './support.js';
import { windowAgainstQueued } from './window.js';

const env = new Pg();
afterAll(() => env.closeAll());

const uid = () => randomUUID().slice(0, 8);

describe.each(KINDS)('%s', (kind) => {
  test("a caller queued in the server while the holder runs gets the key only after the holder's lockAtLeastFor window", async () => {
    const prefix = `lh-${uid()}`;
    const a = createLocks(await env.backend(kind), { prefix, ttl: '30s' });
    const b = createLocks(await env.backend(kind), { prefix, ttl: '30s' });
    // b waits in the server's queue while a's job runs; b gets the key only after a's 3 s window
    await windowAgainstQueued(env, a, b, `${prefix}:job`);
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
