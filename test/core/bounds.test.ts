/**
 * The engine keeps its bounds when a backend call never answers (issue #9), on the memory backend
 * behind a gate that holds calls until it is opened: the scheduling of the core only. The same
 * bounds against real, frozen servers are in test/redis/freeze.test.ts, test/redlock/freeze.test.ts
 * and test/postgres/freeze.test.ts.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import {
  BackendError,
  ClosedError,
  createLocks,
  InvalidArgumentError,
  LeaseLostError,
  LockTimeoutError,
  type Locks,
  type WarningEvent,
} from '../../src/index.js';
import { anySignal } from '../../src/wait.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Slack for timers on a loaded 2-core machine. */
const MARGIN = 200;
const open: Locks[] = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});

type Method = 'acquire' | 'extend' | 'release' | 'inspect' | 'leave' | 'close';

/** A memory backend whose calls (those named in `which`) wait at a gate while it is shut. */
function gated(store = new MemoryStore()) {
  const inner = memory({ store });
  let shut = new Set<Method>();
  const waiting: Array<() => void> = [];
  const started: Record<string, number> = {};
  const order: string[] = [];
  /** The fence of the last grant per key. */
  const granted: Record<string, bigint> = {};
  const pass = async (m: Method) => {
    started[m] = (started[m] ?? 0) + 1;
    if (shut.has(m)) await new Promise<void>((r) => waiting.push(r));
  };
  const backend: Backend = {
    name: 'gated',
    capabilities: inner.capabilities,
    acquire: async (k, r) => {
      await pass('acquire');
      const g = await inner.acquire(k, r);
      if (g) granted[k] = g.fence;
      return g;
    },
    extend: async (items) => (await pass('extend'), inner.extend(items)),
    release: async (k, t) => (await pass('release'), order.push(`release ${k}`), inner.release(k, t)),
    leave: async (k, t) => (await pass('leave'), inner.leave!(k, t)),
    inspect: async (k) => (await pass('inspect'), inner.inspect(k)),
    waitForChange: (k, s, ms) => inner.waitForChange(k, s, ms),
    close: async () => (await pass('close'), order.push('close'), inner.close()),
  };
  return {
    backend,
    store,
    started,
    order,
    granted,
    shut(...methods: Method[]) {
      shut = new Set(methods.length ? methods : ['acquire', 'extend', 'release', 'inspect', 'leave', 'close']);
    },
    open() {
      shut = new Set();
      for (const w of waiting.splice(0)) w();
    },
  };
}

function make(backend: Backend, opts = {}): Locks {
  const l = createLocks(backend, opts);
  open.push(l);
  return l;
}

/** Settles `p` and says how long it took (ms) and how. */
async function timed<T>(p: Promise<T>): Promise<{ ms: number; value?: T; error?: unknown }> {
  const t0 = performance.now();
  try {
    const value = await p;
    return { ms: performance.now() - t0, value };
  } catch (error) {
    return { ms: performance.now() - t0, error };
  }
}

describe('a backend that stops answering', () => {
  test('acquire(wait), acquire(signal), tryAcquire, extend, inspect and close() each settle by their bound', async () => {
    const g = gated();
    const locks = createLocks(g.backend, { opTimeout: 400, ttl: '5s' });
    const lease = await locks.acquire('held');
    g.shut();
    const [wait, signal, tryA, extend, inspect] = await Promise.all([
      timed(locks.acquire('a', { wait: 250 })),
      timed(locks.acquire('b', { signal: AbortSignal.timeout(150) })),
      timed(locks.tryAcquire('c')),
      timed(lease.extend()),
      timed(locks.inspect('d')),
    ]);
    expect(wait.error).toBeInstanceOf(LockTimeoutError);
    expect(wait.ms).toBeLessThan(250 + MARGIN);
    expect((signal.error as Error).name).toBe('TimeoutError'); // the signal's own reason
    expect(signal.ms).toBeLessThan(150 + MARGIN);
    for (const r of [tryA, extend, inspect]) {
      expect(r.error).toBeInstanceOf(BackendError);
      expect(String((r.error as Error).message)).toMatch(/did not answer within 400ms \(opTimeout\)/);
      expect(r.ms).toBeGreaterThanOrEqual(395);
      expect(r.ms).toBeLessThan(400 + MARGIN);
    }
    expect(lease.held).toBe(true); // a slow extend is not a lost lease: renewal may still succeed
    // close(): the release of `held` hangs (≤ opTimeout), then the backend's close hangs (≤ opTimeout)
    const closed = await timed(locks.close());
    expect(closed.error).toBeUndefined();
    expect(closed.ms).toBeLessThan(2 * 400 + MARGIN);
    g.open();
  });

  test('an acquire attempt bounded by the lease validity (shorter than opTimeout) says so when it runs out', async () => {
    const g = gated();
    const locks = make(g.backend, { opTimeout: '5s', ttl: 200 });
    g.shut('acquire');
    const r = await timed(locks.tryAcquire('v'));
    expect(r.error).toBeInstanceOf(BackendError);
    expect(String((r.error as Error).message)).toMatch(
      /did not answer within 196ms \(the lease's validity, shorter than opTimeout\)/,
    );
    expect(r.ms).toBeLessThan(196 + MARGIN);
    g.open();
  });

  test('an extend that outlives the lease is a LeaseLostError at the lease deadline, not later', async () => {
    const g = gated();
    const locks = make(g.backend, { opTimeout: '5s', ttl: 400, renew: false });
    const lease = await locks.acquire('x');
    g.shut('extend');
    const r = await timed(lease.extend());
    expect(r.error).toBeInstanceOf(LeaseLostError);
    expect(r.ms).toBeLessThan(400 + MARGIN);
    expect(lease.held).toBe(false);
    expect(lease.signal.aborted).toBe(true);
    g.open();
  });

  test('a grant that arrives after the caller gave up is released (token-checked)', async () => {
    const g = gated();
    const locks = make(g.backend, { opTimeout: 200 });
    g.shut('acquire');
    const ctrl = new AbortController();
    const results = await Promise.all([
      timed(locks.tryAcquire('late-try')),
      timed(locks.acquire('late-wait', { wait: 100 })),
      timed(
        (setTimeout(() => ctrl.abort(new Error('gave up')), 50), locks.acquire('late-abort', { signal: ctrl.signal })),
      ),
    ]);
    expect(results.map((r) => (r.error as Error)?.constructor.name)).toEqual([
      'BackendError',
      'LockTimeoutError',
      'Error',
    ]);
    g.open(); // the server answers now: each attempt is granted... and given back
    const keys = ['late-try', 'late-wait', 'late-abort'].map((k) => `leasehold:${k}`);
    const until = performance.now() + 2000;
    while (!keys.every((k) => g.granted[k] !== undefined && !g.store.live(k)) && performance.now() < until) {
      await sleep(5);
    }
    const other = make(memory({ store: g.store }));
    for (const k of ['late-try', 'late-wait', 'late-abort']) {
      const l = await other.acquire(k, { wait: 2000 });
      expect(l.fence > g.granted[`leasehold:${k}`]!).toBe(true); // the late grant was released
      await l.release();
    }
  });

  test('close() waits for a call in flight, releases what it got, then closes the backend', async () => {
    const g = gated();
    const locks = createLocks(g.backend, { opTimeout: '2s' });
    g.shut('acquire');
    let ran = false;
    const work = timed(locks.withLock('k', () => (ran = true)));
    await sleep(20);
    const closing = locks.close();
    const rejected = await work; // at once: the caller is told, the call is still in flight
    expect(rejected.error).toBeInstanceOf(ClosedError);
    expect(rejected.error).toMatchObject({ code: 'LEASEHOLD_CLOSED' });
    expect(ran).toBe(false);
    setTimeout(() => g.open(), 100); // the grant arrives while close() waits
    await closing;
    expect(g.order).toEqual(['release leasehold:k', 'close']);
    expect(g.store.live('leasehold:k')).toBeUndefined();
  });

  test('a waiter stuck on a backend call settles at once on close()', async () => {
    const g = gated();
    const locks = createLocks(g.backend, { opTimeout: '10s' });
    g.shut('acquire');
    const waiter = timed(locks.acquire('w', { wait: '20s' }));
    await sleep(20);
    const closing = timed(locks.close());
    const w = await waiter;
    expect(w.error).toBeInstanceOf(ClosedError);
    expect(w.ms).toBeLessThan(20 + MARGIN);
    g.open();
    expect((await closing).error).toBeUndefined();
  });
});

describe('renewal on a hung client', () => {
  test('a lease is lost at its deadline while its renewal hangs, and renewals do not pile up', async () => {
    const g = gated();
    const locks = make(g.backend, { ttl: 300, opTimeout: '2s' }); // renewal every 100ms
    const a = await locks.acquire('a');
    g.shut('extend');
    const t0 = performance.now();
    const before = g.started.extend ?? 0;
    await new Promise((r) => a.signal.addEventListener('abort', r, { once: true }));
    expect(a.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(performance.now() - t0).toBeLessThan(300 + MARGIN);
    // more leases while that renewal still hangs: its call was given up at a's validity (nothing
    // left for it to renew), so they get one renewal call together — which hangs too; they are
    // lost at their deadlines, and no further call is sent to the hung client meanwhile
    const more = await Promise.all(['b', 'c', 'd'].map((k) => locks.acquire(k)));
    await Promise.all(more.map((l) => new Promise((r) => l.signal.addEventListener('abort', r, { once: true }))));
    expect(more.every((l) => !l.held)).toBe(true);
    expect((g.started.extend ?? 0) - before).toBe(2);
    g.open();
  });
});

describe('held and signal agree', () => {
  const block = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end); // a paused process: no timer runs
  };

  test('reading held past the validity marks the lease lost: a cached signal is aborted too', async () => {
    const locks = make(memory(), { ttl: 200 });
    const lease = await locks.acquire('p');
    const signal = lease.signal;
    const seen = await new Promise<[boolean, boolean, unknown]>((resolve) => {
      setTimeout(() => resolve([lease.held, signal.aborted, signal.reason]), 10); // runs before the keeper's timer
      block(300);
    });
    expect(seen[0]).toBe(false);
    expect(seen[1]).toBe(true);
    expect(seen[2]).toBeInstanceOf(LeaseLostError);
  });

  test('reading remaining() or signal first says the same', async () => {
    const locks = make(memory(), { ttl: 200 });
    const [l1, l2] = [await locks.acquire('r1'), await locks.acquire('r2')];
    const seen = await new Promise<unknown[]>((resolve) => {
      setTimeout(() => resolve([l1.remaining(), l1.signal.aborted, l2.signal.aborted, l2.held]), 10);
      block(300);
    });
    expect(seen).toEqual([0, true, true, false]);
  });
});

describe('a grant at the edge of its validity', () => {
  test('is signalled lost at its deadline when its renewal does not answer, whether it waited or not', async () => {
    // ttl 200: validity 196 ms from the attempt's send (1% + 2 ms of drift). A granting attempt
    // answers 180–193 ms after it was called, by blocking the process (so the attempt's own
    // 196 ms bound cannot fire first), leaving the lease 3–16 ms. Its first renewal (due at once)
    // never answers: the keeper must mark it lost at its deadline.
    const g = gated();
    const inner = g.backend.acquire;
    let late = 180;
    const backend: Backend = {
      ...g.backend,
      acquire: async (k, r) => {
        const t0 = performance.now();
        const grant = await inner(k, r);
        if (grant) while (performance.now() < t0 + late); // a slow answer, to the edge of the validity
        return grant;
      },
    };
    const locks = make(backend, { ttl: 200, opTimeout: '5s', wait: '5s' });
    const other = make(memory({ store: g.store }), { ttl: 100, renew: false });
    g.shut('extend');
    const seen: { left: number; lostAfter: number; why: unknown }[] = [];
    for (let i = 0; i < 14; i++) {
      late = 180 + i;
      const key = `edge-${i}`;
      // every other one waits: held elsewhere, its first attempt is refused
      if (i % 2 === 1) await other.acquire(key);
      const lease = await locks.acquire(key);
      const at = performance.now();
      const left = lease.remaining();
      const why = await new Promise<unknown>((resolve) => {
        const done = () => resolve(lease.signal.reason);
        if (lease.signal.aborted) done();
        else lease.signal.addEventListener('abort', done, { once: true });
      });
      seen.push({ left, lostAfter: performance.now() - at, why });
    }
    for (const s of seen) {
      expect(s.left).toBeLessThanOrEqual(16);
      expect(s.why).toBeInstanceOf(LeaseLostError);
      expect(s.lostAfter).toBeLessThan(16 + 50); // at its deadline, plus timer slack
    }
    g.open();
  });
});

describe('options and signals', () => {
  test('opTimeout is validated', () => {
    for (const bad of [0, -1, NaN, Infinity, 'abc', {}, null]) {
      expect(() => createLocks(memory(), { opTimeout: bad as never })).toThrow(InvalidArgumentError);
    }
    expect(() => createLocks(memory(), { opTimeout: '250ms' })).not.toThrow();
  });

  test('waiting calls leave no listener on a long-lived signal (no AbortSignal.any leak)', async () => {
    const store = new MemoryStore();
    const holder = make(memory({ store }));
    const waiter = make(memory({ store }));
    const appLifetime = new AbortController().signal;
    for (let i = 0; i < 20; i++) {
      const lease = await holder.acquire('l');
      const waiting = waiter.acquire('l', { signal: appLifetime, wait: '5s' });
      await sleep(1);
      await lease.release();
      await (await waiting).release();
      await waiter.tryAcquire('other', { signal: appLifetime }).then((l) => l?.release());
    }
    expect(getEventListeners(appLifetime, 'abort')).toHaveLength(0);
    const a = new AbortController();
    const any = anySignal([a.signal, appLifetime]);
    any.dispose();
    expect(getEventListeners(appLifetime, 'abort')).toHaveLength(0);
  });

  test('waits without a signal reuse one controller: one listener on close(), and deadlines and close() still end them', async () => {
    const store = new MemoryStore();
    const holder = make(memory({ store }));
    const waiter = make(memory({ store }));
    const closing = (waiter as unknown as { closingSignal: AbortSignal }).closingSignal;
    const spare = () => (waiter as unknown as { acquirer: { spare: unknown } }).acquirer.spare;
    const waitOnce = async () => {
      const lease = await holder.acquire('l');
      const waiting = waiter.acquire('l', { wait: '5s' });
      await sleep(1);
      await lease.release();
      await (await waiting).release();
    };
    await waitOnce();
    const kept = spare();
    expect(kept).not.toBeNull(); // kept by the wait that ended without aborting it
    for (let i = 0; i < 20; i++) await waitOnce();
    expect(spare()).toBe(kept); // the same controller, wait after wait
    expect(getEventListeners(closing, 'abort')).toHaveLength(1); // its one listener, not one per wait
    // a deadline aborts the controller the wait took: that one is not kept, and the next wait
    // (on a fresh one) is not ended by that old deadline
    const lease = await holder.acquire('l');
    await expect(waiter.acquire('l', { wait: 30 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(spare()).toBeNull();
    const next = waiter.acquire('l', { wait: '5s' });
    await sleep(50);
    await lease.release();
    await (await next).release();
    expect(spare()).not.toBeNull();
    // close() ends a wait on the kept controller at once
    const held = await holder.acquire('l');
    const waiting = waiter.acquire('l', { wait: '5s' });
    waiting.catch(() => {});
    await sleep(5);
    expect(spare()).toBeNull(); // taken by this wait
    const t0 = performance.now();
    await waiter.close();
    await expect(waiting).rejects.toBeInstanceOf(ClosedError);
    expect(performance.now() - t0).toBeLessThan(MARGIN);
    await held.release();
  });
});

/** An error as a client gives it (Node's socket errors carry a `code`). */
const clientError = (message: string, code: string) => Object.assign(new Error(message), { code });

/**
 * A memory backend whose acquire fails with a client's error while `failing` says so: `'lost'`
 * runs the attempt and then fails (the reply was lost: the store may now hold a grant or a queue
 * place under that token), `'refused'` fails before it runs. Every call is logged with its token.
 */
function flaky(store = new MemoryStore()) {
  const inner = memory({ store });
  const log: string[] = [];
  let failing: 'lost' | 'refused' | 'readonly' | null = null;
  let denyGiveBack = false;
  let failed = 0;
  const backend: Backend = {
    name: 'flaky',
    capabilities: inner.capabilities,
    acquire: async (k, r) => {
      if (failing === 'readonly') {
        failed++;
        throw clientError('attempt to write a readonly database', 'SQLITE_READONLY');
      }
      if (failing === 'refused') {
        failed++;
        log.push(`acquire ${r.token} refused`);
        throw clientError('connect ECONNREFUSED 127.0.0.1:6379', 'ECONNREFUSED');
      }
      const g = await inner.acquire(k, r);
      if (failing === 'lost') {
        failed++;
        log.push(`acquire ${r.token} ${g ? 'granted' : 'queued'}, reply lost`);
        throw clientError('read ECONNRESET', 'ECONNRESET');
      }
      log.push(`acquire ${r.token} ${g ? 'granted' : 'queued'}`);
      return g;
    },
    extend: (items) => inner.extend(items),
    release: async (k, t) => {
      if (denyGiveBack) throw clientError("NOPERM this user has no permissions to run the 'evalsha' command", 'NOPERM');
      const r = await inner.release(k, t);
      log.push(`release ${t} ${r}`);
      return r;
    },
    leave: async (k, t) => {
      if (denyGiveBack) throw clientError("NOPERM this user has no permissions to run the 'evalsha' command", 'NOPERM');
      log.push(`leave ${t}`);
      return inner.leave(k, t);
    },
    inspect: (k) => inner.inspect(k),
    waitForChange: (k, s, ms) => inner.waitForChange(k, s, ms),
    close: () => inner.close(),
  };
  return {
    backend,
    log,
    get failed() {
      return failed;
    },
    fail(how: 'lost' | 'refused' | 'readonly' | null) {
      failing = how;
    },
    /** Makes leave and release fail with an error that would fail every call (a refused permission). */
    denyGiveBack(deny: boolean) {
      denyGiveBack = deny;
    },
  };
}

describe('a waiting acquire outlives a failing backend', () => {
  const tokenOf = (line: string) => line.split(' ')[1]!;

  test('an attempt whose reply was lost: the wait goes on under a new token and gives the old grant back first', async () => {
    const f = flaky();
    const locks = make(f.backend, { ttl: '30s', retry: { minDelay: 5, maxDelay: 20 } });
    f.fail('lost');
    const t0 = performance.now();
    const pending = locks.acquire('k', { wait: '5s' });
    // the first attempt was granted on the "server", but its reply was lost; the next ones queue
    while (f.failed < 3) await sleep(5);
    f.fail(null);
    const lease = await pending;
    // far sooner than the 30 s TTL of the orphaned grant: it was released, not waited out
    expect(performance.now() - t0).toBeLessThan(2000);
    const attempts = f.log.filter((l) => l.startsWith('acquire'));
    expect(attempts[0]).toMatch(/ granted, reply lost$/);
    const failedTokens = attempts.filter((l) => l.endsWith('reply lost')).map(tokenOf);
    const winner = tokenOf(attempts.at(-1)!);
    expect(attempts.at(-1)).toMatch(/ granted$/);
    // one token per failed attempt, none reused, and each given back (left, then released)
    expect(new Set([...failedTokens, winner]).size).toBe(failedTokens.length + 1);
    for (const t of failedTokens) {
      const left = f.log.indexOf(`leave ${t}`);
      const released = f.log.findIndex((l) => l.startsWith(`release ${t} `));
      expect(left).toBeGreaterThanOrEqual(0);
      expect(released).toBeGreaterThan(left);
      expect(released).toBeLessThan(f.log.indexOf(attempts.at(-1)!));
    }
    expect(f.log).toContain(`release ${failedTokens[0]} true`); // the orphaned grant
    expect((await locks.inspect('k'))?.fence).toBe(lease.fence);
    await lease.release();
    expect(await locks.inspect('k')).toBeNull();
  });

  test('a backend failing until the deadline: LockTimeoutError with the last failure as cause, one warning, nothing left', async () => {
    const store = new MemoryStore();
    const f = flaky(store);
    const locks = make(f.backend, { retry: { minDelay: 5, maxDelay: 20 } });
    const warnings: WarningEvent[] = [];
    const onWarning = (m: unknown) => warnings.push(m as WarningEvent);
    subscribe('leasehold:warning', onWarning);
    try {
      f.fail('lost');
      const r = await timed(locks.acquire('down', { wait: 400 }));
      expect(r.error).toBeInstanceOf(LockTimeoutError);
      expect((r.error as LockTimeoutError).cause).toBeInstanceOf(BackendError);
      expect((r.error as Error).message).toMatch(/^could not acquire "down" within \d+ms \(last attempt: .*ECONNRESET/);
      expect(r.ms).toBeGreaterThanOrEqual(395);
      expect(r.ms).toBeLessThan(400 + MARGIN);
      expect(f.failed).toBeGreaterThan(3); // retried, with a backoff (not one attempt, not a busy loop)
      expect(warnings.filter((w) => w.code === 'LEASEHOLD_BACKEND_FAILING')).toEqual([
        expect.objectContaining({
          key: 'down',
          message: expect.stringMatching(/ECONNRESET; retrying until its wait deadline/),
        }),
      ]);
      // the tokens of failed attempts are given back once the backend answers: nothing is held
      f.fail(null);
      await locks.close();
      expect(f.log.filter((l) => /^release .* true$/.test(l)).length).toBeGreaterThanOrEqual(1);
      expect(await make(memory({ store })).inspect('down')).toBeNull();
    } finally {
      unsubscribe('leasehold:warning', onWarning);
    }
  });

  test('wait: 0 is one attempt: its BackendError is thrown as it is', async () => {
    const f = flaky();
    const locks = make(f.backend);
    f.fail('refused');
    await expect(locks.acquire('once', { wait: 0 })).rejects.toBeInstanceOf(BackendError);
    await expect(locks.tryAcquire('once')).rejects.toBeInstanceOf(BackendError);
    expect(f.failed).toBe(2);
  });

  test('tryAcquire, runExclusive and acquire(wait: 0) whose reply was lost give the grant back: no orphan lock', async () => {
    const store = new MemoryStore();
    const f = flaky(store);
    const locks = make(f.backend);
    f.fail('lost'); // each attempt is granted on the "server", then its reply is lost
    await expect(locks.tryAcquire('try', { ttl: '10m' })).rejects.toBeInstanceOf(BackendError);
    await expect(locks.runExclusive('run', () => 'ran', { lockAtMostFor: '30m' })).rejects.toBeInstanceOf(BackendError);
    await expect(locks.acquire('once', { ttl: '10m', wait: 0 })).rejects.toBeInstanceOf(BackendError);
    expect(f.log.filter((l) => l.endsWith('granted, reply lost'))).toHaveLength(3);
    f.fail(null);
    await locks.close(); // waits for the give-backs in the background
    const granted = f.log.filter((l) => l.startsWith('acquire ')).map(tokenOf);
    for (const t of granted) expect(f.log).toContain(`release ${t} true`);
    const other = make(memory({ store }));
    for (const key of ['try', 'run', 'once']) expect(await other.inspect(key)).toBeNull();
  });

  test('an error that would fail every attempt (a read-only database) is not retried: it rejects at once', async () => {
    const f = flaky();
    const locks = make(f.backend);
    f.fail('readonly');
    const r = await timed(locks.acquire('ro', { wait: '10s' }));
    expect(r.error).toBeInstanceOf(BackendError);
    expect((r.error as Error).message).toMatch(/readonly database/);
    expect(r.ms).toBeLessThan(MARGIN);
    expect(f.failed).toBe(1);
  });

  test('a give-back of a failed attempt’s token that fails for good (a refused permission) rejects at once', async () => {
    const f = flaky();
    const locks = make(f.backend, { retry: { minDelay: 5, maxDelay: 20 } });
    f.fail('lost'); // the first attempt's reply is lost: its token must be given back first
    f.denyGiveBack(true);
    const pending = timed(locks.acquire('denied', { wait: '3s' }));
    while (f.failed < 1) await sleep(1);
    f.fail(null);
    const r = await pending;
    expect(r.error).toBeInstanceOf(BackendError);
    expect(r.error).not.toBeInstanceOf(LockTimeoutError);
    expect((r.error as Error).message).toMatch(/NOPERM/);
    expect(r.ms).toBeLessThan(1000); // not retried until the 3 s deadline
    expect(f.failed).toBe(1); // no attempt after the refused give-back
    f.denyGiveBack(false);
  });

  test('a refusal before the attempt ran, then the backend is back: granted within the wait', async () => {
    const f = flaky();
    const locks = make(f.backend, { retry: { minDelay: 5, maxDelay: 20 } });
    f.fail('refused');
    const pending = locks.acquire('back', { wait: '5s' });
    while (f.failed < 2) await sleep(5);
    f.fail(null);
    const lease = await pending;
    expect(lease.held).toBe(true);
    await lease.release();
  });
});
