/**
 * Issue #10.1 on the real server, with real processes: a queued waiter that is SIGKILLed holds
 * its place only for the place's bound (`placeTtl`, default 3s), whatever the lease TTL; after
 * that the lock is granted to the next waiter, and `tryAcquire` / `runExclusive` get it too.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { redis, redisKeys } from '../../src/backends/redis/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Clients, REDIS_URL } from '../support/redis.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));
const clients = new Clients();
const open: Locks[] = [];
const kids: ChildProcess[] = [];
const prefix = `lh-live-${randomUUID().slice(0, 8)}`;
afterEach(async () => {
  for (const k of kids.splice(0)) if (k.exitCode === null) k.kill('SIGKILL');
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

async function locksOn(opts = {}) {
  const l = createLocks(redis(await clients.make('ioredis')), { prefix, ...opts });
  open.push(l);
  return l;
}

/** Polls `f` until it returns true or `ms` pass; false on the deadline. */
async function until(f: () => Promise<boolean>, ms: number, every = 20): Promise<boolean> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await f()) return true;
    await new Promise((r) => setTimeout(r, every));
  }
  return false;
}

/** A child process queued for `key` (its place confirmed in the queue), ready to be killed. */
async function queuedChild(key: string, ttlMs: number): Promise<ChildProcess> {
  const admin = await clients.make('ioredis');
  const before = await admin.zcard(redisKeys(`${prefix}:${key}`).q);
  const p = spawn(process.execPath, ['--import', 'tsx', CHILD, 'queue', REDIS_URL, prefix, key, String(ttlMs)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  kids.push(p);
  const queued = await until(async () => (await admin.zcard(redisKeys(`${prefix}:${key}`).q)) > before, 20_000);
  expect(queued, 'the child never joined the queue').toBe(true);
  return p;
}

function kill(p: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    p.once('exit', () => resolve());
    p.kill('SIGKILL');
  });
}

const PLACE_MS = 3000;
/** The place's bound, one refresh interval of the live waiter, and slack for a loaded machine. */
const BOUND_MS = PLACE_MS + PLACE_MS / 3 + 700;

describe.each([
  ['30s', 30_000],
  ['1h', 3_600_000],
])('a SIGKILLed queued waiter, ttl %s', (label, ttlMs) => {
  test('delays the next waiter by at most its place bound', async () => {
    const key = `dead-waiter-${label}`;
    const a = await locksOn({ ttl: ttlMs });
    const b = await locksOn({ ttl: ttlMs });
    const held = await a.acquire(key);
    const child = await queuedChild(key, ttlMs);
    await kill(child);
    const killedAt = performance.now();
    await held.release(); // free, but its dead waiter heads the queue
    const lease = await b.acquire(key, { wait: '20s' });
    const delay = performance.now() - killedAt;
    console.log(`[liveness] ttl ${label}: next waiter granted ${Math.round(delay)} ms after the kill`);
    expect(delay).toBeLessThanOrEqual(BOUND_MS);
    await lease.release();
  }, 40_000);

  test('tryAcquire and runExclusive get the lock within the place bound', async () => {
    const key = `dead-waiter-try-${label}`;
    const a = await locksOn({ ttl: ttlMs });
    const held = await a.acquire(key);
    const child = await queuedChild(key, ttlMs);
    await kill(child);
    const killedAt = performance.now();
    await held.release();
    let ran = false;
    const got = await until(
      async () => {
        const r = await a.runExclusive(key, () => true, { lockAtMostFor: ttlMs });
        ran = r.ran;
        return r.ran;
      },
      20_000,
      50,
    );
    const delay = performance.now() - killedAt;
    console.log(`[liveness] ttl ${label}: runExclusive ran ${Math.round(delay)} ms after the kill`);
    expect(got && ran).toBe(true);
    expect(delay).toBeLessThanOrEqual(PLACE_MS + 700);
    const t = await a.tryAcquire(key); // and the queue no longer holds anyone back
    expect(t).not.toBeNull();
    await t!.release();
  }, 40_000);
});
