/**
 * node-redis 6 bounds each command by its client's `commandOptions.timeout` (5 s unless set) with
 * an `AbortSignal.timeout` per command, whose timer wakes the process seconds after the reply.
 * The adapter's script calls go without it (the engine bounds them), unless the user gave the
 * client a timeout: then theirs stands. On the real server at 6379.
 */
import { randomUUID } from 'node:crypto';
import { createClient } from 'redis';
import { afterAll, afterEach, expect, test, vi } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks } from '../../src/index.js';
import { REDIS_URL } from '../support/redis.js';

const prefix = `lh-nr-timeout-${randomUUID().slice(0, 8)}`;
const closers: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of closers.splice(0)) await c();
});
afterEach(() => {
  vi.restoreAllMocks();
});

/** AbortSignal.timeout calls during an acquire and a release (after a warm-up pair). */
async function timersPerPair(commandOptions?: { timeout: number }): Promise<number> {
  const client = createClient({ url: REDIS_URL, ...(commandOptions ? { commandOptions } : {}) });
  await client.connect();
  const locks = createLocks(redis(client), { ttl: 5_000 });
  closers.push(async () => {
    await locks.close();
    await client.close();
  });
  const key = `${prefix}:${commandOptions ? 'theirs' : 'default'}`;
  await (await locks.acquire(key)).release(); // scripts loaded
  const spy = vi.spyOn(AbortSignal, 'timeout');
  await (await locks.acquire(key)).release();
  return spy.mock.calls.length;
}

test('node-redis: an acquire and a release set no per-command timer on a client with default options', async () => {
  expect(await timersPerPair()).toBe(0);
});

test("node-redis: a client given a command timeout keeps it on leasehold's calls", async () => {
  expect(await timersPerPair({ timeout: 4_000 })).toBeGreaterThanOrEqual(2);
});
