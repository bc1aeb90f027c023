/**
 * runExclusive whose lease was lost while fn ran: fn ran past lockAtMostFor (the lease is never
 * renewed, so it expires), or the lock was deleted or taken over and the loss was noticed. Another
 * instance may have run the job beside it, so the run rejects with the LeaseLostError once fn
 * returns, as withLock does, keeps no lockAtLeastFor window and leaves nothing held. Before, it
 * resolved `{ ran: true, value }` and the caller was never told.
 *
 * A lease that is not renewed learns of a deletion at its own expiry, when its window is kept (a
 * token-checked extend, or `keep`), or, with no window, at its token-checked release, which finds
 * the lock gone (test/core/release-gone.test.ts).
 * On the memory backend, and on a real Redis (127.0.0.1:6379).
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { redis } from '../../src/backends/redis/index.js';
import { ClosedError, createLocks, LeaseLostError, type Lease, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
const make = (backend: Backend, opts = {}) => {
  const l = createLocks(backend, opts);
  open.push(l);
  return l;
};
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

/** Resolves once the lease is marked lost (the engine's timer at its deadline). */
const lostOf = (lease: Lease) =>
  new Promise<unknown>((r) => {
    if (lease.signal.aborted) r(lease.signal.reason);
    else lease.signal.addEventListener('abort', () => r(lease.signal.reason), { once: true });
  });

/** Waits out the stored expiry of `key`, as `locks` reads it (the engine's deadline comes first, by its drift allowance). */
async function untilFree(locks: Locks, key: string): Promise<void> {
  for (let info = await locks.inspect(key); info; info = await locks.inspect(key)) await sleep(info.remainingMs + 1);
}

const stall = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

describe('runExclusive whose lease was lost while fn ran (memory)', () => {
  test('fn ran past lockAtMostFor: another instance ran meanwhile; rejects with LeaseLostError; no window kept', async () => {
    const store = new MemoryStore();
    const a = make(memory({ store }));
    const b = make(memory({ store }));
    let elsewhere: unknown;
    const run = a.runExclusive(
      'nightly',
      async (lease) => {
        expect(await lostOf(lease)).toBeInstanceOf(LeaseLostError);
        await untilFree(b, 'nightly');
        elsewhere = await b.runExclusive('nightly', () => 'b ran', { lockAtMostFor: '1m' });
        return 'a done';
      },
      { lockAtLeastFor: 100, lockAtMostFor: 200 },
    );
    const e = await run.catch((x: unknown) => x);
    expect(e).toBeInstanceOf(LeaseLostError);
    expect((e as LeaseLostError).key).toBe('nightly');
    expect(elsewhere).toEqual({ ran: true, value: 'b ran' }); // the job ran twice at the same time
    expect(await b.inspect('nightly')).toBeNull(); // nothing held, no window kept for the lost lease
    expect(await b.runExclusive('nightly', () => 'next')).toEqual({ ran: true, value: 'next' });
  });

  test('fn stalled the event loop past lockAtMostFor (no timer ran): rejects with LeaseLostError', async () => {
    const a = make(memory());
    const run = a.runExclusive(
      'stalled',
      () => {
        stall(300);
        return 'done';
      },
      { lockAtLeastFor: 100, lockAtMostFor: 200 },
    );
    await expect(run).rejects.toBeInstanceOf(LeaseLostError);
    expect(await a.inspect('stalled')).toBeNull();
  });

  test('the lock force-released and taken while fn ran: the window is refused, and the run rejects', async () => {
    const store = new MemoryStore();
    const a = make(memory({ store }));
    const b = make(memory({ store }));
    let elsewhere: unknown;
    const run = a.runExclusive(
      'nightly',
      async () => {
        await b.backend.forceRelease!('leasehold:nightly'); // the stored key (the default prefix)
        elsewhere = await b.runExclusive('nightly', () => 'b ran', { lockAtLeastFor: '1m', lockAtMostFor: '5m' });
        return 'a done';
      },
      { lockAtLeastFor: '1m', lockAtMostFor: '5m' },
    );
    await expect(run).rejects.toBeInstanceOf(LeaseLostError);
    expect(elsewhere).toEqual({ ran: true, value: 'b ran' });
    // b's window is left alone (the token-checked extend and release touch only a's lock)
    const info = await b.inspect('nightly');
    expect(info!.remainingMs).toBeGreaterThan(50_000);
  });

  test('a normal run resolves { ran: true, value } and keeps its lockAtLeastFor window', async () => {
    const store = new MemoryStore();
    const a = make(memory({ store }));
    const b = make(memory({ store }));
    const opts = { lockAtLeastFor: '1m', lockAtMostFor: '5m' };
    expect(await a.runExclusive('ok', () => 'value', opts)).toEqual({ ran: true, value: 'value' });
    expect(await b.runExclusive('ok', () => 'again', opts)).toEqual({ ran: false });
    const info = await b.inspect('ok');
    expect(info!.remainingMs).toBeGreaterThan(50_000);
    expect(info!.remainingMs).toBeLessThanOrEqual(60_000);
  });

  test('close() while fn runs still detaches the lease: ClosedError, not LeaseLostError', async () => {
    const store = new MemoryStore();
    const a = createLocks(memory({ store }));
    const b = make(memory({ store }));
    let started!: () => void;
    let finish!: () => void;
    const isRunning = new Promise<void>((r) => (started = r));
    const run = a.runExclusive(
      'closing',
      () => {
        started();
        return new Promise<string>((r) => (finish = () => r('done')));
      },
      { lockAtLeastFor: '1m', lockAtMostFor: '5m' },
    );
    run.catch(() => {});
    await isRunning;
    await a.close();
    finish();
    await expect(run).rejects.toBeInstanceOf(ClosedError);
    expect((await b.inspect('closing'))!.remainingMs).toBeGreaterThan(60_000); // kept until lockAtMostFor
  });
});

describe.each([
  ['ioredis', false],
  ['ioredis', true],
  ['node-redis', false],
] as const)('runExclusive whose lock was deleted while fn ran (redis, %s, session: %s)', (kind, session) => {
  const pair = async () => {
    const prefix = `lh-exlost-${randomUUID().slice(0, 8)}`;
    const a = make(redis(await clients.make(kind), { session }), { prefix });
    const b = make(redis(await clients.make(kind), { session }), { prefix });
    return { a, b, full: (k: string) => `${prefix}:${k}` };
  };

  test('with a lockAtLeastFor window: its extend is refused, and the run rejects with LeaseLostError', async () => {
    const { a, b, full } = await pair();
    let elsewhere: unknown;
    const run = a.runExclusive(
      'nightly',
      async () => {
        await b.backend.forceRelease!(full('nightly')); // deleted from outside
        elsewhere = await b.runExclusive('nightly', () => 'b ran', { lockAtMostFor: '1m' });
        return 'a done';
      },
      { lockAtLeastFor: '1m', lockAtMostFor: '5m' },
    );
    await expect(run).rejects.toBeInstanceOf(LeaseLostError);
    expect(elsewhere).toEqual({ ran: true, value: 'b ran' });
    expect(await b.inspect('nightly')).toBeNull(); // no window kept, nothing held
  });

  test('fn ran past a short lockAtMostFor: lost at expiry; another instance ran; the run rejects', async () => {
    const { a, b, full } = await pair();
    let elsewhere: unknown;
    const run = a.runExclusive(
      'short',
      async (lease) => {
        await b.backend.forceRelease!(full('short'));
        elsewhere = await b.runExclusive('short', () => 'b ran', { lockAtMostFor: '1m' });
        expect(await lostOf(lease)).toBeInstanceOf(LeaseLostError); // noticed only at its expiry
        return 'a done';
      },
      { lockAtMostFor: 300 },
    );
    await expect(run).rejects.toBeInstanceOf(LeaseLostError);
    expect(elsewhere).toEqual({ ran: true, value: 'b ran' });
    expect(await b.inspect('short')).toBeNull();
  });

  test('a deletion under a run with no window that returns inside lockAtMostFor is seen at the release', async () => {
    // no call between the grant and the token-checked release, which finds the lock gone
    const { a, b, full } = await pair();
    const run = a.runExclusive(
      'unseen',
      async () => {
        await b.backend.forceRelease!(full('unseen'));
        return 'a done';
      },
      { lockAtMostFor: '5m' },
    );
    await expect(run).rejects.toBeInstanceOf(LeaseLostError);
    expect(await b.inspect('unseen')).toBeNull();
  });

  test('a normal run resolves { ran: true, value } and keeps its lockAtLeastFor window', async () => {
    const { a, b, full } = await pair();
    const opts = { lockAtLeastFor: '1m', lockAtMostFor: '5m' };
    expect(await a.runExclusive('ok', () => 'value', opts)).toEqual({ ran: true, value: 'value' });
    expect(await b.runExclusive('ok', () => 'again', opts)).toEqual({ ran: false });
    const info = await b.inspect('ok');
    expect(info!.remainingMs).toBeGreaterThan(50_000);
    expect(info!.remainingMs).toBeLessThanOrEqual(60_000);
    await b.backend.forceRelease!(full('ok')); // not left in Redis for a minute
  });
});
