/**
 * close() while a runExclusive function still runs: the lock is not released under it (another
 * instance would run the same job at once, beside this one). The lease is detached and the lock
 * kept by its stored expiry (lockAtMostFor), as after a crash; a backend whose locks end with
 * their session first stores it (`keep`); the run rejects with a ClosedError once fn returns, as
 * withLock does. On the memory backend (the engine's scheduling); on real Redis in
 * test/redis/exclusive-close.test.ts.
 */
import { afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { ClosedError, createLocks, type Lease, type Locks } from '../../src/index.js';

const open: Locks[] = [];
const make = (backend: Backend, opts = {}) => {
  const l = createLocks(backend, opts);
  open.push(l);
  return l;
};
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});

function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** Starts `fn`'s run on `locks` and resolves once fn is running, with what lets it finish. */
async function running(locks: Locks, key: string, opts: object) {
  const started = deferred<Lease>();
  const finish = deferred<string>();
  let runs = 0;
  const result = locks.runExclusive(
    key,
    (lease) => {
      runs++;
      started.resolve(lease);
      return finish.promise;
    },
    opts,
  );
  result.catch(() => {}); // asserted by the caller
  return { result, lease: await started.promise, finish: finish.resolve, runs: () => runs };
}

describe('close() while a runExclusive function runs', () => {
  test('keeps the lock until lockAtMostFor: no second run meanwhile; the run rejects with ClosedError', async () => {
    const store = new MemoryStore();
    const a = createLocks(memory({ store }));
    const b = make(memory({ store }));
    const opts = { lockAtLeastFor: '1m', lockAtMostFor: '5m' };
    const run = await running(a, 'nightly', opts);
    await a.close(); // graceful shutdown while the job runs
    expect(run.lease.signal.aborted).toBe(true); // fn is told, as withLock's is
    expect(run.lease.held).toBe(false);
    // another instance must not run the job while the first one still runs
    let ranElsewhere = false;
    expect(await b.runExclusive('nightly', () => (ranElsewhere = true), opts)).toEqual({ ran: false });
    expect(ranElsewhere).toBe(false);
    run.finish('done');
    await expect(run.result).rejects.toBeInstanceOf(ClosedError);
    // kept by its stored expiry, lockAtMostFor from the grant (not released when fn returned)
    const info = await b.inspect('nightly');
    expect(info?.fence).toBe(run.lease.fence);
    expect(info!.remainingMs).toBeGreaterThan(60_000);
    expect(info!.remainingMs).toBeLessThanOrEqual(300_000);
    expect(await b.runExclusive('nightly', () => 'again', opts)).toEqual({ ran: false });
  });

  test('an error of fn is thrown as it is; a run that finished before close() keeps its result and window', async () => {
    const store = new MemoryStore();
    const a = createLocks(memory({ store }));
    const b = make(memory({ store }));
    const done = await a.runExclusive('early', () => 'ran', { lockAtLeastFor: '1m', lockAtMostFor: '5m' });
    expect(done).toEqual({ ran: true, value: 'ran' });
    const failing = a.runExclusive('fails', () => Promise.reject(new Error('job failed')));
    await expect(failing).rejects.toThrow('job failed');
    const run = await running(a, 'throws', { lockAtMostFor: '5m' });
    await a.close();
    run.finish(Promise.reject(new Error('stopped by its signal')) as never);
    await expect(run.result).rejects.toThrow('stopped by its signal');
    // the window of the run that finished before close() holds: about 1 minute, not 5
    const info = await b.inspect('early');
    expect(info!.remainingMs).toBeGreaterThan(50_000);
    expect(info!.remainingMs).toBeLessThanOrEqual(60_000);
    expect((await b.inspect('throws'))?.fence).toBe(run.lease.fence);
  });

  test('a backend whose locks end with its session stores the lock (keep) before it is closed', async () => {
    const store = new MemoryStore();
    const inner = memory({ store });
    const calls: string[] = [];
    const kept = new Map<string, number>();
    // a session backend's shape: keep() stores the lock for `ms` (here: an extend), close() ends the rest
    const backend: Backend = {
      name: 'session-like',
      capabilities: inner.capabilities,
      acquire: (k, r) => inner.acquire(k, r),
      extend: (items) => inner.extend(items),
      release: async (k, t) => (calls.push('release'), inner.release(k, t)),
      keep: async (k, t, ms) => {
        calls.push('keep');
        kept.set(k, ms);
        const [ok] = await inner.extend([{ key: k, token: t, ttlMs: ms }]);
        return ok === true;
      },
      close: async () => (calls.push('close'), inner.close()),
    };
    const a = createLocks(backend);
    const run = await running(a, 'job', { lockAtMostFor: '2m' });
    await a.close();
    expect(calls).toEqual(['keep', 'close']); // never released under fn, kept before the backend closed
    const ms = kept.get('leasehold:job')!;
    expect(ms).toBeGreaterThan(110_000); // the rest of lockAtMostFor
    expect(ms).toBeLessThanOrEqual(120_000);
    run.finish('done');
    await expect(run.result).rejects.toBeInstanceOf(ClosedError);
    expect(calls).toEqual(['keep', 'close']);
    expect(run.runs()).toBe(1);
  });
});
