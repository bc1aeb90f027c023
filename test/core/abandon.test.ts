/**
 * An acquire attempt its caller gave up on (its signal, the wait deadline, close()) while it was
 * on its way, which then ran on the server and whose reply came back as an error (a dropped
 * connection): what it left — a lock, or a place in the fair queue — is given back once it
 * settled, token-checked. Before, only a late *value* was given back: the lock stayed held by a
 * token nobody had, or the dead queue place refused the free lock to everyone, for the whole TTL.
 * The scheduling of the core only: a real memory store behind a wrapper that holds attempts at a
 * gate and loses their replies.
 */
import { afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { ClosedError, createLocks, LockTimeoutError, type Locks } from '../../src/index.js';

const open: Locks[] = [];
const make = (backend: Backend, opts = {}) => {
  const l = createLocks(backend, opts);
  open.push(l);
  return l;
};
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * A memory backend whose next acquire attempts (`hold(n)`) wait at a gate; once let through, each
 * runs on the store and its reply is lost (it rejects with ECONNRESET). `log` lists the calls.
 */
function lossy(store: MemoryStore) {
  const inner = memory({ store });
  const log: string[] = [];
  let held = 0;
  let skip = 0;
  let gate = deferred();
  let arrived = deferred();
  const applied: Array<Promise<void>> = [];
  const backend: Backend = {
    name: 'lossy',
    capabilities: inner.capabilities,
    acquire: async (k, r) => {
      if (held === 0) return inner.acquire(k, r);
      if (skip > 0) return (skip--, inner.acquire(k, r));
      held--;
      const done = deferred();
      applied.push(done.promise);
      arrived.resolve();
      await gate.promise;
      const g = await inner.acquire(k, r);
      log.push(`acquire ${g ? 'granted' : 'queued'}, reply lost`);
      done.resolve();
      throw Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
    },
    extend: (items) => inner.extend(items),
    release: async (k, t) => {
      const r = await inner.release(k, t);
      log.push(`release ${r}`);
      return r;
    },
    leave: async (k, t) => {
      await inner.leave(k, t);
      log.push('leave');
    },
    inspect: (k) => inner.inspect(k),
    // no waitForChange: a waiter pauses for its retry backoff, then attempts again
    close: async () => {
      log.push('close');
      await inner.close();
    },
  };
  return {
    backend,
    log,
    /** After `after` attempts that go through, the next `n` wait at the gate (and lose their replies). */
    hold(n = 1, after = 0) {
      held = n;
      skip = after;
      gate = deferred();
      arrived = deferred();
    },
    /** Resolves once a held attempt reached the gate. */
    get arrived() {
      return arrived.promise;
    },
    /** Lets the held attempts through; resolves once they ran on the store. */
    async letThrough() {
      gate.resolve();
      await Promise.all(applied.splice(0));
    },
  };
}

describe('an attempt given up on its way, which then runs and loses its reply', () => {
  test('acquire aborted by its signal: the lock it got is released, not held for its TTL', async () => {
    const store = new MemoryStore();
    const f = lossy(store);
    const locks = make(f.backend, { ttl: '10m' });
    f.hold();
    const ac = new AbortController();
    const pending = locks.acquire('k', { signal: ac.signal });
    await f.arrived;
    ac.abort(new Error('caller gave up'));
    await expect(pending).rejects.toThrow('caller gave up');
    await f.letThrough(); // granted on the store; the engine hears ECONNRESET
    await locks.close(); // waits for the clean-ups in flight
    expect(f.log).toEqual(['acquire granted, reply lost', 'leave', 'release true', 'close']);
    expect(await make(memory({ store })).inspect('k')).toBeNull();
  });

  test('acquire whose wait deadline passed: the lock it got is released', async () => {
    const store = new MemoryStore();
    const f = lossy(store);
    const locks = make(f.backend, { ttl: '10m' });
    f.hold();
    const pending = locks.acquire('k', { wait: 20 });
    await f.arrived;
    await expect(pending).rejects.toBeInstanceOf(LockTimeoutError);
    await f.letThrough();
    await locks.close();
    expect(f.log).toContain('release true');
    expect(await make(memory({ store })).inspect('k')).toBeNull();
  });

  test('tryAcquire ended by close(): close() waits for the attempt and releases what it got', async () => {
    const store = new MemoryStore();
    const f = lossy(store);
    const locks = make(f.backend, { ttl: '10m' });
    f.hold();
    const pending = locks.tryAcquire('k');
    await f.arrived;
    const closing = locks.close();
    await expect(pending).rejects.toBeInstanceOf(ClosedError);
    await f.letThrough(); // while close() waits for calls in flight
    await closing;
    // released before the backend was closed; a tryAcquire never queues: nothing to leave
    expect(f.log).toEqual(['acquire granted, reply lost', 'release true', 'close']);
    expect(await make(memory({ store })).inspect('k')).toBeNull();
  });

  test("a waiter's attempt that queued after it gave up leaves the queue, and the holder keeps its lock", async () => {
    const store = new MemoryStore();
    const holder = make(memory({ store }));
    const h = await holder.acquire('k');
    const f = lossy(store);
    const waiter = make(f.backend, { ttl: '10m', retry: { minDelay: 1, maxDelay: 5 } });
    const ac = new AbortController();
    f.hold(1, 1); // the first attempt is refused and queues; the wait's next attempt is held
    const first = waiter.acquire('k', { signal: ac.signal });
    await f.arrived;
    ac.abort(new Error('caller gave up'));
    await expect(first).rejects.toThrow('caller gave up');
    await f.letThrough(); // the held attempt queues on the store, and its reply is lost
    await waiter.close();
    // left after the attempt settled (a leave sent at the abort would have come before it), and
    // the token-checked release did not touch the holder's lock
    expect(f.log.slice(0, 3)).toEqual(['acquire queued, reply lost', 'leave', 'release false']);
    expect(store.queues.get('leasehold:k')).toBeUndefined();
    expect((await holder.inspect('k'))?.fence).toBe(h.fence);
    // the lock goes to the next one in line at once, not after the dead place's 10 minutes
    await h.release();
    const third = make(memory({ store }));
    const t = await third.acquire('k', { wait: 2000 });
    expect(t.held).toBe(true);
    await t.release();
  });
});
