/**
 * A caller's `lease.extend()` and the keeper's renewals of the same lease, on the memory backend
 * behind a wrapper that applies every call at once but holds back chosen replies until the test
 * lets them go (a slow network on the way back): the core's scheduling only.
 */
import { afterEach, describe, expect, test } from 'vitest';
import type { Backend, ExtendItem } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { createLocks, LeaseLostError, type Locks } from '../../src/index.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const open: Locks[] = [];
const make = (backend: Backend, opts = {}) => {
  const l = createLocks(backend, opts);
  open.push(l);
  return l;
};
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});

/**
 * A memory backend that logs the TTL of every extend item it is sent and applies it at once; the
 * reply of an extend whose (first) TTL is in `hold` waits until `letGo(ttl)`.
 */
function replies(store = new MemoryStore()) {
  const inner = memory({ store });
  const sent: number[] = [];
  const hold = new Set<number>();
  const held = new Map<number, Array<() => void>>();
  const backend: Backend = {
    name: 'held-replies',
    capabilities: inner.capabilities,
    acquire: (k, r) => inner.acquire(k, r),
    extend: async (items: readonly ExtendItem[]) => {
      for (const it of items) sent.push(it.ttlMs);
      const r = await inner.extend(items); // applied on the "server" now
      const ttl = items[0]!.ttlMs;
      if (hold.has(ttl)) await new Promise<void>((go) => held.set(ttl, [...(held.get(ttl) ?? []), go]));
      return r;
    },
    release: (k, t) => inner.release(k, t),
    inspect: (k) => inner.inspect(k),
    close: () => inner.close(),
  };
  return {
    backend,
    store,
    sent,
    hold: (ttl: number) => hold.add(ttl),
    /** True once an extend with this TTL is waiting for its reply. */
    waiting: (ttl: number) => (held.get(ttl)?.length ?? 0) > 0,
    letGo(ttl: number) {
      hold.delete(ttl);
      for (const go of held.get(ttl) ?? []) go();
      held.delete(ttl);
    },
  };
}

/** Resolves once `signal` aborts, or with 'timeout' after `ms`. */
function aborted(signal: AbortSignal, ms: number): Promise<'aborted' | 'timeout'> {
  if (signal.aborted) return Promise.resolve('aborted');
  return new Promise((r) => {
    const timer = setTimeout(() => r('timeout'), ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), r('aborted')), { once: true });
  });
}

describe('extend() and renewal of the same lease', () => {
  test('no renewal is sent while a longer extend() is in flight: the lease never believes more than the server holds', async () => {
    const r = replies();
    const locks = make(r.backend, { ttl: 300 }); // renewed every 100 ms with a 300 ms TTL
    const lease = await locks.acquire('x');
    r.hold(60_000);
    const ext = lease.extend(60_000); // applied at once; its reply waits
    while (!r.waiting(60_000)) await sleep(1);
    // two renewal intervals pass while the reply is out: a renewal sent now (300 ms) would be
    // applied after the 60 s extension, and the server would drop the lock 300 ms later
    await sleep(250);
    r.letGo(60_000);
    await ext;
    expect(r.sent.filter((t) => t === 300)).toEqual([]);
    await sleep(400); // past what a 300 ms renewal would have left on the server
    const info = await locks.inspect('x');
    expect(info?.fence).toBe(lease.fence);
    expect(lease.held).toBe(true);
    expect(lease.remaining()).toBeLessThanOrEqual(info!.remainingMs);
    expect(lease.remaining()).toBeGreaterThan(55_000);
  });

  test('of two extend() calls, the one sent last decides the expiry, whichever answers first', async () => {
    const r = replies();
    const locks = make(r.backend, { ttl: '5s', renew: false });
    const lease = await locks.acquire('x');
    r.hold(60_000);
    const long = lease.extend(60_000); // sent first, answered last
    while (!r.waiting(60_000)) await sleep(1);
    await lease.extend(300); // sent last: the server's expiry is 300 ms from now
    r.letGo(60_000);
    await long;
    expect(lease.remaining()).toBeLessThanOrEqual(300);
    // and it is signalled lost when the server drops it, not a minute later
    expect(await aborted(lease.signal, 1500)).toBe('aborted');
    expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(await locks.inspect('x')).toBeNull();
  });
});

describe('extend() to a shorter ttl', () => {
  test('a renewed lease is renewed on the new ttl’s schedule: the server never drops it', async () => {
    const r = replies();
    const locks = make(r.backend, { ttl: '15s' }); // first renewal due after 5 s
    const lease = await locks.acquire('x');
    await lease.extend(600); // from now on renewed every 200 ms
    await sleep(1500); // well past the 600 ms the extension alone gives
    expect(r.sent.filter((t) => t === 600).length).toBeGreaterThanOrEqual(4); // the extend, then renewals
    expect((await locks.inspect('x'))?.fence).toBe(lease.fence);
    expect(lease.held).toBe(true);
    expect(lease.remaining()).toBeLessThanOrEqual(600);
  });

  test('a lease with renew: false is signalled lost at the new expiry, not the old one', async () => {
    const locks = make(memory(), { ttl: '5s', renew: false });
    const lease = await locks.acquire('x');
    const signal = lease.signal; // read once, before the extend, as a worker passes it on
    const t0 = performance.now();
    await lease.extend(500);
    expect(await aborted(signal, 2000)).toBe('aborted');
    expect(performance.now() - t0).toBeGreaterThanOrEqual(480);
    expect(signal.reason).toBeInstanceOf(LeaseLostError);
    expect(await locks.inspect('x')).toBeNull();
  });
});

describe('an extend() to a shorter ttl whose answer is late', () => {
  test('the lease believes the shorter expiry from the send, and is lost at it: never held by two', async () => {
    const r = replies();
    const locks = make(r.backend, { ttl: '10s', opTimeout: '5s' });
    const other = make(memory({ store: r.store }), { ttl: '10s' });
    const lease = await locks.acquire('x');
    r.hold(200);
    const t0 = performance.now();
    const ext = lease.extend(200).catch((e: unknown) => e); // applied at once; its answer waits
    expect(lease.remaining()).toBeLessThanOrEqual(200);
    expect(await aborted(lease.signal, 1000)).toBe('aborted');
    expect(performance.now() - t0).toBeLessThan(400); // at the extension's own validity, not opTimeout
    expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(await ext).toBe(lease.signal.reason);
    const got = await other.acquire('x', { wait: '1s' }); // the server dropped it
    expect(lease.held).toBe(false);
    r.letGo(200);
    await got.release();
  });
});

describe('a lease that ran out during a stall (no timer ran)', () => {
  const block = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end); // a paused process
  };

  test('release() and extend() see it lost first: the signal says LeaseLostError, extend() throws it', async () => {
    const store = new MemoryStore();
    const locks = make(memory({ store }), { ttl: 100, renew: false });
    const other = make(memory({ store }), { ttl: '10s' });
    const a = await locks.acquire('k');
    const signal = a.signal;
    block(200);
    const b = await other.acquire('k', { wait: 0 });
    expect(await a.release()).toBe(false);
    expect(signal.reason).toBeInstanceOf(LeaseLostError);
    await expect(a.extend()).rejects.toBe(signal.reason);
    const a2 = await locks.acquire('k2');
    block(200);
    await other.acquire('k2', { wait: 0 });
    await expect(a2.extend('5s')).rejects.toBeInstanceOf(LeaseLostError);
    expect(b.held).toBe(true);
  });
});

describe('an extend() whose answer is lost (an error, not a refusal)', () => {
  /** The memory backend, but an extend with a TTL in `fail` is applied and then answered with an error. */
  function lostAnswers(fail: number) {
    const inner = memory();
    const backend: Backend = {
      name: 'lost-answers',
      capabilities: inner.capabilities,
      acquire: (k, r) => inner.acquire(k, r),
      extend: async (items: readonly ExtendItem[]) => {
        const r = await inner.extend(items); // applied on the "server"
        if (items[0]!.ttlMs === fail) throw new Error('connection reset after the write');
        return r;
      },
      release: (k, t) => inner.release(k, t),
      inspect: (k) => inner.inspect(k),
      close: () => inner.close(),
    };
    return backend;
  }

  test('to a shorter ttl, renew: false: the lease is lost when the server may have dropped it, not at its old expiry', async () => {
    const locks = make(lostAnswers(500), { ttl: '15s', renew: false });
    const lease = await locks.acquire('x');
    const signal = lease.signal;
    await expect(lease.extend(500)).rejects.toThrow('connection reset');
    // the server applied it: it drops the lock 500 ms later, so the lease must not claim more
    expect(lease.remaining()).toBeLessThanOrEqual(500);
    expect(await aborted(signal, 2000)).toBe('aborted');
    expect(signal.reason).toBeInstanceOf(LeaseLostError);
    expect(await locks.inspect('x')).toBeNull();
  });

  test('to a shorter ttl, renewed: a renewal comes before the shorter expiry, and the server keeps the lock', async () => {
    const locks = make(lostAnswers(600), { ttl: '15s' }); // without the failed extend: first renewal after 5 s
    const lease = await locks.acquire('x');
    await expect(lease.extend(600)).rejects.toThrow('connection reset');
    await sleep(1200); // twice what the failed extension alone would leave on the server
    expect((await locks.inspect('x'))?.fence).toBe(lease.fence);
    expect(lease.held).toBe(true);
  });

  test('to a longer ttl: the lease keeps its own, sooner expiry', async () => {
    const locks = make(lostAnswers(60_000), { ttl: 900, renew: false });
    const lease = await locks.acquire('x');
    await expect(lease.extend(60_000)).rejects.toThrow('connection reset');
    expect(lease.remaining()).toBeLessThanOrEqual(900);
  });
});
