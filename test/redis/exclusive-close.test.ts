/**
 * close() while a runExclusive function still runs, on a real Redis: the lock is not released
 * under the running job, so another instance (its own client and Locks) does not run the same job
 * beside it; the lock lasts until its stored expiry (lockAtMostFor) and the first run rejects with
 * a ClosedError once its function returns. Before, close() released it at once: two runs at the
 * same time, the first one resolved `{ ran: true }`, and the lockAtLeastFor window was gone.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { ClosedError, createLocks, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

describe.each([
  ['ioredis', false],
  ['ioredis', true],
  ['node-redis', false],
] as const)('redis (%s, session: %s): close() during runExclusive', (kind, session) => {
  test('no second run while the first one runs; the lock lasts until lockAtMostFor; ClosedError after', async () => {
    const prefix = `lh-exclose-${randomUUID().slice(0, 8)}`;
    const a = createLocks(redis(await clients.make(kind), { session }), { prefix });
    const b = createLocks(redis(await clients.make(kind), { session }), { prefix });
    open.push(a, b);
    const opts = { lockAtLeastFor: '1m', lockAtMostFor: '5m' };
    let running = 0;
    let most = 0;
    let finish!: () => void;
    let started!: () => void;
    const isRunning = new Promise<void>((r) => (started = r));
    const job = (then: Promise<void>) => async () => {
      most = Math.max(most, ++running);
      started();
      await then;
      running--;
      return 'done';
    };
    const first = a.runExclusive('nightly', job(new Promise<void>((r) => (finish = r))), opts);
    first.catch(() => {});
    await isRunning;
    await a.close(); // SIGTERM: graceful shutdown while the job runs
    expect(await b.runExclusive('nightly', job(Promise.resolve()), opts)).toEqual({ ran: false });
    finish();
    await expect(first).rejects.toBeInstanceOf(ClosedError);
    expect(most).toBe(1);
    // kept by its PX, lockAtMostFor from the grant: not released, and more than the 1m window
    const info = await b.inspect('nightly');
    expect(info!.remainingMs).toBeGreaterThan(60_000);
    expect(info!.remainingMs).toBeLessThanOrEqual(300_000);
    expect(await b.runExclusive('nightly', job(Promise.resolve()), opts)).toEqual({ ran: false });
    await b.backend.forceRelease!(`${prefix}:nightly`); // not left in Redis for 5 minutes
  });
});
