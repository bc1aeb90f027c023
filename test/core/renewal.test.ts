/**
 * The keeper's renewals when calls overlap, hang or fail one item at a time, on the memory backend
 * behind wrappers that hold back chosen calls until the test lets them go (a slow connection, a
 * driver with several connections): the core's scheduling only.
 */
import { afterEach, describe, expect, test } from 'vitest';
import type { Backend, ExtendItem } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { BackendError, createLocks, LeaseLostError, type Locks } from '../../src/index.js';
import { collectEvents, findSecret } from '../support/secrets.js';

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

/** The memory backend with `extend` replaced (the rest passes through). */
function withExtend(store: MemoryStore, extend: (inner: Backend, items: readonly ExtendItem[]) => Promise<unknown[]>) {
  const inner = memory({ store });
  const backend: Backend = {
    name: 'wrapped',
    capabilities: inner.capabilities,
    acquire: (k, r) => inner.acquire(k, r),
    extend: (items) => extend(inner, items) as ReturnType<Backend['extend']>,
    release: (k, t) => inner.release(k, t),
    inspect: (k) => inner.inspect(k),
    close: () => inner.close(),
  };
  return backend;
}

describe('a renewal and an extend() in flight together', () => {
  test('the renewal sent first is applied last: the lease believes its sooner expiry, and is renewed before it', async () => {
    const store = new MemoryStore();
    const gate: { go?: () => void } = {};
    let renewalApplied = false;
    // a keeper renewal (ttl 300) waits on its way to the server until the test lets it go
    const backend = withExtend(store, async (inner, items) => {
      if (items[0]!.ttlMs === 300 && !renewalApplied) {
        await new Promise<void>((r) => (gate.go = r));
        const res = await inner.extend(items);
        renewalApplied = true;
        return res;
      }
      return inner.extend(items);
    });
    const locks = make(backend, { ttl: 300 }); // renewed every 100 ms
    const other = make(memory({ store }), { ttl: '10s' });
    const lease = await locks.acquire('k');
    while (!gate.go) await sleep(1); // the keeper's renewal was sent
    await lease.extend('5s'); // sent after it, applied and answered first
    // the server may yet apply the renewal (here it will): 300 ms from then, not 5 s
    expect(lease.remaining()).toBeLessThanOrEqual(300);
    gate.go();
    while (!renewalApplied) await sleep(1);
    await sleep(500); // past the 300 ms the late renewal left on the server
    const got = await other.tryAcquire('k');
    expect(got).toBeNull(); // the lease was renewed (on its 5 s ttl) before the server dropped it
    expect(lease.held).toBe(true);
    expect(lease.remaining()).toBeGreaterThan(4000);
  });
});

describe('a renewal call that never answers', () => {
  test('is given up at its leases’ validity (shorter than opTimeout): a lease acquired since is renewed', async () => {
    const store = new MemoryStore();
    let calls = 0;
    const backend = withExtend(store, (inner, items) => (++calls === 1 ? new Promise(() => {}) : inner.extend(items)));
    const locks = make(backend, { ttl: 600, opTimeout: '2s' });
    const a = await locks.acquire('a');
    await new Promise((r) => a.signal.addEventListener('abort', r, { once: true })); // its renewal hangs
    expect(a.signal.reason).toBeInstanceOf(LeaseLostError);
    const c = await locks.acquire('c'); // the client answers again
    await sleep(1500); // 2.5 of c's ttl: it lives only if it was renewed
    expect(c.held).toBe(true);
    expect(calls).toBeGreaterThan(2);
    expect((await locks.inspect('c'))?.fence).toBe(c.fence);
  });
});

describe('one item of a renewal fails', () => {
  test('its error is scrubbed of the token before it is published, as a whole call’s is', async () => {
    const store = new MemoryStore();
    let bad = '';
    // the item of lease `a` comes back as a client error that quotes its token (as ioredis' does)
    const backend = withExtend(store, async (inner, items) => {
      const res = await inner.extend(items);
      return res.map((r, i) =>
        items[i]!.token === bad
          ? Object.assign(new Error(`TRYAGAIN for ${bad}`), { command: { args: [items[i]!.key, bad] } })
          : r,
      );
    });
    const locks = make(backend, { ttl: 300 });
    const a = await locks.acquire('a');
    const c = await locks.acquire('c');
    bad = a.token;
    const events = collectEvents();
    try {
      await sleep(250); // a couple of renewals, each failing for `a`
      const thrown = await a.extend().catch((e: unknown) => e);
      expect(thrown).toBeInstanceOf(BackendError);
      const failed = events.messages.filter((m) => (m as { error?: unknown }).error !== undefined);
      expect(failed.length).toBeGreaterThan(1);
      expect(findSecret([failed, thrown], [a.token])).toBeNull();
      expect(c.held).toBe(true);
    } finally {
      events.stop();
    }
  });
});
