/**
 * The engine's own behaviour (scheduling, clocks, signals, events), on the memory backend with
 * wrappers that slow it down or make it fail. A wrapper never stands in for a real server here:
 * backend behaviour is the conformance suite's job.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterEach, describe, expect, test, vi, type MockInstance } from 'vitest';
import type { AcquireRequest, Backend, ExtendItem } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import {
  BackendError,
  createLocks,
  FenceGate,
  InvalidArgumentError,
  LeaseholdError,
  LeaseLostError,
  StaleFenceError,
  type Locks,
} from '../../src/index.js';
import { spy } from '../conformance/spy.js';
import { findSecret } from '../support/secrets.js';

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

/** Delays every call of a real memory backend (a slow network). */
function slow(inner: Backend, ms: number): Backend {
  return {
    name: inner.name,
    capabilities: inner.capabilities,
    acquire: async (k, r) => (await sleep(ms), inner.acquire(k, r)),
    extend: async (items) => (await sleep(ms), inner.extend(items)),
    release: async (k, t) => (await sleep(ms), inner.release(k, t)),
    close: () => inner.close(),
  };
}

describe('renewal', () => {
  test('one keeper renews all held leases in batches, not a call per lease', async () => {
    const b = spy(memory());
    const locks = make(b, { ttl: 600 }); // renewal interval 200ms
    const leases = await Promise.all(Array.from({ length: 200 }, (_, i) => locks.acquire(`k${i}`)));
    await sleep(1300); // ≥ 6 renewal intervals
    expect(leases.every((l) => l.held)).toBe(true);
    const renewedItems = b.extendBatches.reduce((a, n) => a + n, 0);
    expect(renewedItems).toBeGreaterThanOrEqual(200 * 4);
    // leases acquired together are renewed together: a handful of calls per interval at most
    expect(b.extendBatches.length).toBeLessThanOrEqual(2 * 7);
    expect(Math.max(...b.extendBatches)).toBe(200);
  });

  test('a refused renewal marks the lease lost: held false, signal aborted with LeaseLostError, an event', async () => {
    const store = new MemoryStore();
    const locks = make(memory({ store }), { ttl: 300 });
    const lease = await locks.acquire('x');
    const events: any[] = [];
    const on = (m: unknown) => events.push(m);
    diagnostics.subscribe('leasehold:lost', on);
    try {
      store.locks.delete('leasehold:x');
      await new Promise((r) => lease.signal.addEventListener('abort', r, { once: true }));
      expect(lease.held).toBe(false);
      expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
      expect(lease.remaining()).toBe(0);
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ key: 'x', fence: lease.fence, backend: 'memory' });
      expect(JSON.stringify(events[0], (_, v) => (typeof v === 'bigint' ? `${v}` : v))).not.toContain(lease.token);
    } finally {
      diagnostics.unsubscribe('leasehold:lost', on);
    }
  });

  test('failing renewals are retried, then the lease is lost at its own deadline — no unhandled rejection', async () => {
    const inner = memory();
    let failing = false;
    let attempts = 0;
    const flaky: Backend = {
      ...Object.fromEntries(['acquire', 'release', 'close'].map((m) => [m, (inner as any)[m].bind(inner)])),
      name: 'flaky',
      capabilities: inner.capabilities,
      extend: async (items: readonly ExtendItem[]) => {
        if (failing) {
          attempts++;
          throw new Error('connection reset');
        }
        return inner.extend(items);
      },
    } as unknown as Backend;
    const locks = make(flaky, { ttl: 400 });
    const lease = await locks.acquire('x');
    const t0 = performance.now();
    failing = true;
    await new Promise((r) => lease.signal.addEventListener('abort', r, { once: true }));
    const after = performance.now() - t0;
    expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(attempts).toBeGreaterThanOrEqual(2);
    // lost no later than the lease's validity (400ms minus drift) after its last good renewal
    expect(after).toBeLessThanOrEqual(450);
  });

  test('renew: false leases are not renewed and are lost when their TTL runs out', async () => {
    const b = spy(memory());
    const locks = make(b, { ttl: 200, renew: false });
    const lease = await locks.acquire('x');
    await new Promise((r) => lease.signal.addEventListener('abort', r, { once: true }));
    expect(b.extendBatches).toHaveLength(0);
    expect(lease.held).toBe(false);
  });
});

describe('clocks', () => {
  test('remaining() counts from before the acquire was sent, minus a drift margin', async () => {
    const locks = make(slow(memory(), 80), { ttl: 1000 });
    const lease = await locks.acquire('x');
    const left = lease.remaining();
    // ≥ 80ms of the round trip already spent, and 1% + 2ms drift
    expect(left).toBeLessThanOrEqual(1000 - 80 - 12 + 1);
    expect(left).toBeGreaterThan(700);
    await sleep(50);
    expect(lease.remaining()).toBeLessThan(left);
  });
});

describe('lease lifecycle', () => {
  test('release aborts the signal with a plain abort; a second release returns false', async () => {
    const locks = make(memory());
    const lease = await locks.acquire('x');
    expect(await lease.release()).toBe(true);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).not.toBeInstanceOf(LeaseLostError);
    expect(await lease.release()).toBe(false);
  });

  test('extend with a new TTL moves the deadline', async () => {
    const locks = make(memory(), { ttl: 500, renew: false });
    const lease = await locks.acquire('x');
    await lease.extend('5s');
    expect(lease.remaining()).toBeGreaterThan(4000);
  });

  test('extend with a ttl that leaves no validity after the drift allowance is refused before any I/O', async () => {
    const b = spy(memory());
    const locks = make(b, { ttl: '5s', renew: false });
    const lease = await locks.acquire('tiny-extend');
    for (const ttl of [1, 2, '2ms']) {
      const e = await lease.extend(ttl).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect((e as Error).message).toMatch(/leaves no validity after the drift allowance.*at least 3ms/);
    }
    expect(b.extendBatches).toEqual([]); // no backend call
    expect(lease.held).toBe(true); // and the lease is as it was
    expect(lease.remaining()).toBeGreaterThan(4000);
  });

  test('a ttl or lockAtMostFor that leaves no validity is refused before any I/O, as extend refuses it', async () => {
    const b = spy(memory());
    const locks = make(b);
    const tiny = /a (ttl|lockAtMostFor) of [12]ms leaves no validity after the drift allowance.*at least 3ms/;
    expect(() => createLocks(b, { ttl: 2 })).toThrow(tiny);
    expect(() => locks.elect('t', { value: 'a', ttl: 2 })).toThrow(tiny);
    for (const call of [
      () => locks.acquire('t', { ttl: 2, renew: false }),
      () => locks.acquire('t', { ttl: '1ms' }),
      () => locks.tryAcquire('t', { ttl: 1 }),
      () => locks.withLock('t', () => 'ran', { ttl: 2, renew: false }),
      () => locks.runExclusive('t', () => 'ran', { lockAtMostFor: 2 }),
    ]) {
      const e = await call().catch((x: unknown) => x);
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect((e as Error).message).toMatch(tiny);
    }
    expect(b.calls).toBe(0); // no backend call
  });

  test('runExclusive keeps a lockAtLeastFor window of 1–2 ms left (rounded up to 3 ms), rather than releasing', async () => {
    const inner = memory();
    const log: string[] = [];
    const b: Backend = Object.assign(Object.create(inner) as Backend, {
      extend: (items: readonly ExtendItem[]) => (log.push(`extend ${items[0]!.ttlMs}`), inner.extend(items)),
      release: (k: string, t: string) => (log.push('release'), inner.release(k, t)),
    });
    const locks = make(b);
    let clock: MockInstance<() => number> | undefined;
    try {
      const r = await locks.runExclusive(
        'window',
        (lease) => {
          // the clock stops 48.5 ms after the grant: fn returns with 1.5 ms of the 50 ms window left
          const from = (lease as unknown as { grantedAt: number }).grantedAt;
          clock = vi.spyOn(performance, 'now').mockReturnValue(from + 48.5);
          return 'ran';
        },
        { lockAtLeastFor: 50, lockAtMostFor: '10s' },
      );
      expect(r).toEqual({ ran: true, value: 'ran' });
    } finally {
      clock?.mockRestore();
    }
    expect(log).toEqual(['extend 3']); // the window is kept by the stored expiry, not released
  });

  test('an extension not confirmed within its own validity rejects with LeaseLostError saying so', async () => {
    // every call answers after 30 ms: an extend(10) has 8 ms of validity, over before the answer
    const locks = make(slow(memory(), 30), { ttl: '5s', renew: false });
    const lease = await locks.acquire('late-extend');
    const e = await lease.extend(10).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(LeaseLostError);
    // lost at the extension's own validity (8 ms), which the server applied at once, not at the answer
    expect((e as Error).message).toMatch(/extension to 10ms ran out before it was confirmed \(8ms of validity/);
    expect(lease.held).toBe(false);
    expect(lease.signal.reason).toBe(e);
    // a ttl that outlasts the answer still extends
    const other = await locks.acquire('late-extend-ok');
    await other.extend(2000);
    expect(other.held).toBe(true);
    expect(other.remaining()).toBeGreaterThan(1900);
  });

  test('a release that fails on the wire throws BackendError and still ends the lease locally', async () => {
    const inner = memory();
    const broken: Backend = {
      ...Object.fromEntries(['acquire', 'extend', 'close'].map((m) => [m, (inner as any)[m].bind(inner)])),
      name: 'broken',
      capabilities: inner.capabilities,
      release: async () => {
        throw new Error('socket closed');
      },
    } as unknown as Backend;
    const locks = make(broken);
    const lease = await locks.acquire('x');
    await expect(lease.release()).rejects.toBeInstanceOf(BackendError);
    expect(lease.held).toBe(false);
    // withLock does not turn a finished job into a failure because the release could not be sent
    await expect(locks.withLock('y', () => 7)).resolves.toBe(7);
  });

  test('an abort while the grant is in flight gives the lock back', async () => {
    const store = new MemoryStore();
    const locks = make(slow(memory({ store }), 50));
    const ctrl = new AbortController();
    const p = locks.acquire('x', { signal: ctrl.signal });
    setTimeout(() => ctrl.abort(new Error('changed my mind')), 10);
    await expect(p).rejects.toThrow('changed my mind');
    await sleep(120);
    expect(store.live('leasehold:x')).toBeUndefined();
  });

  test('an already-aborted signal rejects at once with its reason, before any I/O', async () => {
    const b = spy(memory());
    const locks = make(b);
    const reason = new Error('no');
    await expect(locks.acquire('x', { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    await expect(locks.tryAcquire('x', { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(b.calls).toBe(0);
  });

  test('close() aborts waiters', async () => {
    const store = new MemoryStore();
    const a = make(memory({ store }));
    const b = make(memory({ store }));
    await a.acquire('x');
    const waiting = b.acquire('x', { wait: '10s' });
    // it rejects while close() is still running: handled from the start, asserted below
    waiting.catch(() => {});
    await sleep(20);
    await b.close();
    await expect(waiting).rejects.toMatchObject({ code: 'LEASEHOLD_CLOSED' });
  });
});

describe('events', () => {
  test('acquire, wait, extend and release are published without the token', async () => {
    const seen: Record<string, any[]> = {};
    const subs = ['acquire', 'release', 'extend', 'wait'].map((n) => {
      const fn = (m: unknown) => (seen[n] ??= []).push(m);
      diagnostics.subscribe(`leasehold:${n}`, fn);
      return () => diagnostics.unsubscribe(`leasehold:${n}`, fn);
    });
    try {
      const locks = make(memory());
      const lease = await locks.acquire('evt');
      expect(seen.wait).toBeUndefined(); // granted at once: no wait
      const waiting = locks.acquire('evt', { wait: '5s' });
      await lease.extend();
      await lease.release();
      await (await waiting).release();
      expect(seen.acquire?.[0]).toMatchObject({ key: 'evt', fence: 1n, attempts: 1 });
      expect(seen.acquire?.[1]).toMatchObject({ key: 'evt', fence: 2n });
      expect(seen.extend?.[0]).toMatchObject({ key: 'evt', ok: true });
      expect(seen.release?.[0]).toMatchObject({ key: 'evt', released: true });
      expect(seen.wait?.map((m) => [m.phase, m.outcome])).toEqual([
        ['start', undefined],
        ['end', 'acquired'],
      ]);
      const all = JSON.stringify(seen, (_, v) => (typeof v === 'bigint' ? `${v}` : v));
      expect(all).not.toContain(lease.token);
    } finally {
      subs.forEach((u) => u());
    }
  });
});

describe('errors and fencing', () => {
  test('every error is a LeaseholdError with a stable code', () => {
    const e = new StaleFenceError('r', 1n, 2n);
    expect(e).toBeInstanceOf(LeaseholdError);
    expect(e.code).toBe('LEASEHOLD_STALE_FENCE');
    expect(e.name).toBe('StaleFenceError');
    expect(new InvalidArgumentError('x').code).toBe('LEASEHOLD_INVALID_ARGUMENT');
  });

  test('FenceGate rejects a lower fence, passes an equal one', () => {
    const gate = new FenceGate();
    gate.check('row:1', 5n);
    gate.check('row:1', 5n);
    gate.check('row:1', 7n);
    expect(() => gate.check('row:1', 6n)).toThrow(StaleFenceError);
    gate.check('row:2', 1n);
    expect(gate.highestFor('row:1')).toBe(7n);
    expect(() => gate.check('row:1', 7 as never)).toThrow(InvalidArgumentError);
  });

  test('tokens are long and random', async () => {
    const locks = make(memory());
    const tokens = new Set<string>();
    for (let i = 0; i < 50; i++) {
      const l = await locks.acquire('t');
      expect(Buffer.from(l.token, 'base64url').length).toBeGreaterThanOrEqual(16);
      tokens.add(l.token);
      await l.release();
    }
    expect(tokens.size).toBe(50);
  });
});

test('withLock rejects with LEASEHOLD_CLOSED when close() released its lease while fn ran', async () => {
  const locks = createLocks(memory());
  let release!: () => void;
  const running = locks.withLock('k', () => new Promise<string>((r) => (release = () => r('done'))));
  await new Promise((r) => setTimeout(r, 5));
  await locks.close();
  release();
  await expect(running).rejects.toMatchObject({ code: 'LEASEHOLD_CLOSED' });
});

describe('local waiters', () => {
  /** A real memory backend whose waits hear nothing: a waiter returns only at its bound or abort. */
  function deaf(store = new MemoryStore()) {
    const inner = memory({ store });
    const waits = { count: 0 };
    const backend: Backend = {
      name: 'deaf',
      capabilities: inner.capabilities,
      acquire: (k, r) => inner.acquire(k, r),
      extend: (items) => inner.extend(items),
      release: (k, t) => inner.release(k, t),
      leave: (k, t) => inner.leave!(k, t),
      waitForChange: (_k, signal, maxMs) => {
        waits.count++;
        return new Promise<void>((resolve) => {
          const t = setTimeout(resolve, maxMs);
          signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
        });
      },
      close: () => inner.close(),
    };
    return { backend, store, waits };
  }
  /** The pauses of `locks` that a local release can end (the engine's kick controllers). */
  const kickable = (locks: Locks) => (locks as unknown as { acquirer: { kicks: Map<string, unknown> } }).acquirer.kicks;
  async function until(f: () => boolean, ms = 5000): Promise<void> {
    const end = performance.now() + ms;
    while (!f()) {
      if (performance.now() > end) throw new Error('timed out');
      await sleep(5);
    }
  }

  test('a local release ends a local waiter’s pause at once, though the backend sends no wake-up', async () => {
    const { backend, waits } = deaf();
    const locks = make(backend, { ttl: '30s' }); // a pause lasts up to ttl/3 = 10 s
    const a = await locks.acquire('k');
    const waiting = locks.acquire('k', { wait: '20s' });
    await until(() => kickable(locks).size === 1 && waits.count === 1); // paused, kickable
    const t0 = performance.now();
    await a.release();
    const b = await waiting;
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(b.fence > a.fence).toBe(true);
    expect(kickable(locks).size).toBe(0);
    await b.release();
  });

  test('every lease settles its key’s count once: released, lost or detached by lockAtLeastFor', async () => {
    const store = new MemoryStore();
    const locks = make(memory({ store }), { ttl: '300ms' });
    const local = (locks as unknown as { acquirer: { local: Map<string, number> } }).acquirer.local;
    const released = await locks.acquire('released');
    const lost = await locks.acquire('lost');
    expect([...local.keys()].sort()).toEqual(['leasehold:lost', 'leasehold:released']);
    await released.release();
    await released.release(); // a second release changes nothing
    store.locks.delete('leasehold:lost'); // broken from outside: the next renewal finds out
    await new Promise((r) => lost.signal.addEventListener('abort', r, { once: true }));
    await until(() => !local.has('leasehold:lost'));
    await locks.runExclusive(
      'window',
      async () => {
        expect(local.get('leasehold:window')).toBe(1);
      },
      { lockAtLeastFor: '200ms' },
    );
    expect(local.size).toBe(0);
  });

  test('a waiter on another instance’s lock pauses without a kick controller; it still gets the lock', async () => {
    const { backend, store, waits } = deaf();
    const other = make(deaf(store).backend, { ttl: '3s' });
    const locks = make(backend, { ttl: '3s' }); // a pause lasts up to 1 s
    const a = await other.acquire('k');
    const waiting = locks.acquire('k', { wait: '20s' });
    await until(() => waits.count === 1);
    expect(kickable(locks).size).toBe(0);
    await a.release();
    const b = await waiting; // at its pause's bound: nothing in this process could wake it sooner
    expect(b.fence > a.fence).toBe(true);
    await b.release();
  });
});

describe('election: a term lost before it could lead', () => {
  test('campaign never returns a term that is already lost, and emits neither elected nor demoted for it', async () => {
    // ttl 20 ms, and every grant answers 25 ms after it was called, by blocking the process (so
    // the attempt's own bound cannot fire first): the lease's validity (ttl minus the drift
    // allowance) has passed when it is granted. Before, campaign returned that dead term and
    // 'demoted' never came (a listener added to an already-aborted signal never runs): a leader
    // that never learns it is not one
    const inner = memory();
    const late: Backend = Object.assign(Object.create(inner) as Backend, {
      acquire: async (k: string, r: AcquireRequest) => {
        const t0 = performance.now();
        const g = await inner.acquire(k, r);
        while (performance.now() < t0 + 25);
        return g;
      },
    });
    const locks = createLocks(late, { ttl: 20 });
    try {
      const e = locks.elect('lapsing', { value: 'a' });
      const events: string[] = [];
      e.on('elected', () => events.push('elected'));
      e.on('demoted', () => events.push('demoted'));
      const t0 = performance.now();
      await expect(e.campaign({ signal: AbortSignal.timeout(300) })).rejects.toThrow();
      expect(performance.now() - t0).toBeGreaterThanOrEqual(250); // it campaigned on, until the signal
      expect(events).toEqual([]);
      expect(await e.leader()).toBeNull();
    } finally {
      await locks.close();
    }
  });
});

describe('election: one campaign at a time per handle', () => {
  test('a second campaign() while one is in flight is refused, so resign() hands the leadership over', async () => {
    // before, the second call took a place of its own in the queue, behind its own term: at
    // resign() it took the lock straight back, ahead of the candidate that was waiting
    const store = new MemoryStore();
    const A = createLocks(memory({ store }));
    const B = createLocks(memory({ store }));
    try {
      const a = A.elect('once', { value: 'a' });
      const b = B.elect('once', { value: 'b' });
      const first = a.campaign();
      await expect(a.campaign()).rejects.toThrow(/already campaigning/);
      await first;
      expect(await a.campaign()).toBe(await first); // leading: the same term, no new campaign
      const bLeads = b.campaign();
      await expect.poll(() => store.queues.get('leasehold:election:once')?.size ?? 0).toBe(1);
      await a.resign();
      const term = await bLeads;
      expect(b.isLeader).toBe(true);
      expect(a.isLeader).toBe(false);
      expect(await a.leader()).toEqual({ value: 'b', fence: term.fence });
      // an election hides its Locks (and so the store's tokens) from a walk over its properties
      expect(findSecret(b, [term.token])).toBeNull();
      // after it settled, a handle may campaign again
      const again = a.campaign({ signal: AbortSignal.timeout(100) });
      await expect(again).rejects.toThrow();
      await b.resign();
      expect(await a.campaign()).toBeDefined();
    } finally {
      await Promise.all([A.close(), B.close()]);
    }
  });
});

describe('withLock: a lease that ran out while fn stalled the event loop', () => {
  test('rejects with LeaseLostError although fn finished, and runExclusive names itself for a bad signal', async () => {
    // fn blocks the thread past the TTL (a long GC pause, a CPU-bound stretch): no timer ran, so
    // nothing had marked the lease lost yet. Before, withLock resolved with fn's value
    const locks = createLocks(memory());
    try {
      const stall = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
      const r = locks.withLock(
        'stalled',
        () => {
          stall(400);
          return 'done';
        },
        { ttl: 300 },
      );
      await expect(r).rejects.toBeInstanceOf(LeaseLostError);
      await expect(locks.runExclusive('x', () => 1, { signal: 'no' as never })).rejects.toThrow(
        /^runExclusive: signal must be an AbortSignal/,
      );
    } finally {
      await locks.close();
    }
  });
});

describe('recipes: bad input before any I/O, told about the caller own key', () => {
  test('idempotent checks wait, signal and its key (with the idem: tag) before reading the store; elect its name', async () => {
    const b = memory();
    let reads = 0;
    const get = b.results.get.bind(b.results);
    b.results.get = (k) => (reads++, get(k));
    const locks = createLocks(b);
    try {
      const bad = async (p: Promise<unknown>, m: RegExp) => {
        const e = await p.then(
          () => null,
          (x: unknown) => x,
        );
        expect(e).toBeInstanceOf(InvalidArgumentError);
        expect((e as Error).message).toMatch(m);
      };
      await bad(
        locks.idempotent('k', () => 1, { wait: -1 }),
        /^wait must be ≥ 0/,
      );
      await bad(
        locks.idempotent('k', () => 1, { signal: 'x' as never }),
        /^idempotent: signal must be an AbortSignal/,
      );
      await bad(
        locks.idempotent('x'.repeat(1020), () => 1),
        /^key is 1020 UTF-8 bytes; at most 1019 \(it is locked as "idem:…"/,
      );
      expect(reads).toBe(0); // before, the store was read first and the 1020-byte key was told as 1025
      expect(await locks.idempotent('x'.repeat(1019), () => 7)).toBe(7);
      expect(() => locks.elect('x'.repeat(1020), { value: 'v' })).toThrow(
        /^election name is 1020 UTF-8 bytes; at most 1015/,
      );
    } finally {
      await locks.close();
    }
  });
});

describe('election: why a term ended', () => {
  test("'demoted' after resign() says resigned; after close() it says the lease was released, not resigned", async () => {
    const locks = createLocks(memory());
    const e = locks.elect('why', { value: 'a' });
    const told: string[] = [];
    e.on('demoted', (err) => void told.push((err as Error).message));
    await e.campaign();
    await e.resign();
    await e.campaign();
    await locks.close(); // before, this too was told as "resigned the leadership"
    expect(told).toEqual([
      'resigned the leadership of "why"',
      `the term of "why" ended: its lease was released (close() or the term's release())`,
    ]);
  });
});

describe("election: an 'elected' listener that throws", () => {
  test('campaign() rejects with its error and the term is given up: not leader, and another candidate is elected', async () => {
    const store = new MemoryStore();
    const a = make(memory({ store }));
    const b = make(memory({ store }));
    const ea = a.elect('listener', { value: 'A' });
    const told: string[] = [];
    ea.on('elected', () => {
      throw new Error('listener bug');
    });
    ea.on('demoted', (err) => void told.push((err as Error).message));
    await expect(ea.campaign()).rejects.toThrow('listener bug');
    expect(ea.isLeader).toBe(false);
    expect(await ea.leader()).toBeNull(); // released, not held and renewed by nobody's term
    expect(told).toEqual(['resigned the leadership of "listener"']);
    const term = await b.elect('listener', { value: 'B' }).campaign();
    expect(await ea.leader()).toEqual({ value: 'B', fence: term.fence });
  });
});

describe('memory backend: nothing kept per key it no longer needs', () => {
  test('a store passed where the options go is told how to pass it', () => {
    // before: 'memory: unknown option "locks"'
    expect(() => memory(new MemoryStore() as never)).toThrow(
      'memory: pass a shared store as an option: memory({ store })',
    );
  });

  test('20,000 keys locked once each and released, then expired results: the store holds nothing for them', async () => {
    // before, a fence counter and a wake-up count stayed for every key ever locked, and an
    // expired result until its key was read again: a worker locking a key per order id grew forever
    const store = new MemoryStore();
    const locks = createLocks(memory({ store }));
    try {
      let last = 0n;
      for (let i = 0; i < 20_000; i++) {
        const lease = await locks.acquire(`order:${i}`);
        expect(lease.fence > last).toBe(true); // fences still grow (unique across keys now)
        last = lease.fence;
        await lease.release();
      }
      for (let i = 0; i < 2_000; i++) await locks.idempotent(`pay:${i}`, async () => i, { ttl: 50 });
      await new Promise((r) => setTimeout(r, 100)); // the results' 50 ms TTL passes
      for (let i = 0; i < 1_100; i++) await (await locks.acquire(`tick:${i % 10}`)).release(); // sweeps run on writes
      expect(store.locks.size).toBe(0);
      expect(store.queues.size).toBe(0);
      expect(store.generations.size).toBe(0);
      expect(store.results.size).toBeLessThan(1_024); // what the last writes stored since the sweep
      expect([...store.results.keys()].filter((k) => k.includes('pay:'))).toEqual([]);
      // a key locked again continues above every fence it had
      const again = await locks.acquire('order:0');
      expect(again.fence > last).toBe(true);
      await again.release();
    } finally {
      await locks.close();
    }
  });
});
