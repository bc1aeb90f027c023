/**
 * Session renewals (`renewSessions`, Redis session mode) have the per-lease path's properties
 * (renewal-hung.test.ts): a hung call for one session costs only the sessions it carries (a
 * session due behind it is sent in a call of its own once urgent), the calls in flight stay
 * bounded when the client stops answering, and calls that answer cost no extra call: every due
 * session goes in one call per tick. On the memory backend behind a wrapper that hangs its leases
 * off sessions (one per key's first letter) and renews a session by extending its leases: the
 * core's scheduling.
 */
import { afterEach, expect, test } from 'vitest';
import type { Backend, ExtendItem } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { createLocks, LeaseLostError, type Lease, type Locks } from '../../src/index.js';

const open: Locks[] = [];
/** Ends the calls held forever (failed, as a dropped connection would), so close() need not wait for them. */
const held: Array<() => void> = [];
afterEach(async () => {
  for (const end of held.splice(0)) end();
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});

/**
 * The memory backend with sessions: a renewed lease of key `<s>…` hangs off session `<s>` (its
 * first letter). `renewSessions` extends each session's leases, after `delayMs`; it hangs when
 * `hang(sessions)` says so. `sent` lists each call's sessions, `times` when it was sent.
 */
function sessions(o: { hang?: (ids: string[]) => boolean; delayMs?: number } = {}) {
  const inner = memory({ store: new MemoryStore() });
  const leases = new Map<string, Map<string, ExtendItem>>(); // session → token → item
  const sent: string[][] = [];
  const times: number[] = []; // performance.now() of each call
  const waiters: Array<() => void> = [];
  const renewOne = async (id: string) => {
    const items = [...(leases.get(id)?.values() ?? [])];
    const res = await inner.extend(items);
    return { ok: true, lost: items.filter((_, i) => res[i] !== true).map((i) => i.token) };
  };
  const backend: Backend = {
    name: 'sessions',
    capabilities: inner.capabilities,
    acquire: async (key, req) => {
      const g = await inner.acquire(key, req);
      if (!g || !req.renew) return g;
      const id = key.slice(key.lastIndexOf(':') + 1)[0]!;
      if (!leases.has(id)) leases.set(id, new Map());
      leases.get(id)!.set(req.token, { key, token: req.token, ttlMs: req.ttlMs });
      return { fence: g.fence, session: id };
    },
    extend: (items) => inner.extend(items),
    renewSessions: async (ids) => {
      sent.push([...ids]);
      times.push(performance.now());
      for (const w of waiters.splice(0)) w();
      if (o.hang?.([...ids])) {
        return new Promise((_, reject) => held.push(() => reject(new Error('connection dropped'))));
      }
      if (o.delayMs) await new Promise((r) => setTimeout(r, o.delayMs));
      return Promise.all(ids.map(renewOne));
    },
    release: (k, t) => {
      for (const m of leases.values()) m.delete(t);
      return inner.release(k, t);
    },
    inspect: (k) => inner.inspect(k),
    close: () => inner.close(),
  };
  /** Resolves once `n` renewSessions calls have been sent. */
  const calls = async (n: number) => {
    while (sent.length < n) await new Promise<void>((r) => waiters.push(r));
  };
  return { backend, sent, times, calls };
}

const lost = (l: Lease) => new Promise((r) => l.signal.addEventListener('abort', r, { once: true }));

test('a hung renewal of a long session does not hold back a short session acquired since', async () => {
  // the renewal of session `l` never answers; every other renewal does (opTimeout: its default, 5 s)
  const s = sessions({ hang: (ids) => ids.includes('l') });
  const locks = createLocks(s.backend);
  open.push(locks);
  const long = await locks.acquire('long', { ttl: 3000 }); // renewed after 1 s, that call hangs ~2 s
  await s.calls(1);
  expect(s.sent[0]).toEqual(['l']);
  const short = await locks.acquire('short', { ttl: 600 }); // due in 200 ms, lost in 600 ms unless renewed
  await Promise.race([s.calls(4), lost(short)]); // three renewals of `s` answered while `l`'s hangs
  expect(short.held).toBe(true);
  expect(s.sent.slice(1)).toEqual([['s'], ['s'], ['s']]);
  await lost(long); // its own renewal hung: lost at its deadline
  expect(long.signal.reason).toBeInstanceOf(LeaseLostError);
  expect(short.held).toBe(true);
  expect((await locks.inspect('short'))?.fence).toBe(short.fence);
});

test('at most 4 renewal calls are in flight: an urgent session past that waits for the first to be given up', async () => {
  // every renewal hangs; 6 s TTL (due 2 s after the grant, urgent ~4 s after it): `a` at 0, its
  // call sent at ~2 s and given up at a's validity (~5.9 s); b…f from 1.2 s, 100 ms apart (not due
  // at a's call: more than half an interval to go), urgent from ~5.1 s to ~5.5 s
  const s = sessions({ hang: () => true });
  const locks = createLocks(s.backend);
  open.push(locks);
  const t0 = performance.now();
  const at = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, t0 + ms - performance.now())));
  const leases: Lease[] = [await locks.acquire('a', { ttl: 6000 })];
  for (const [i, k] of ['b', 'c', 'd', 'e', 'f'].entries()) {
    await at(1200 + i * 100);
    leases.push(await locks.acquire(k, { ttl: 6000 }));
  }
  await Promise.race([s.calls(5), lost(leases[5]!)]);
  // b, c and d are sent beside a's hung call, each once urgent; e and f wait until a's call is
  // given up, then go together
  expect(s.sent).toEqual([['a'], ['b'], ['c'], ['d'], ['e', 'f']]);
  expect(s.times[4]! - s.times[0]!).toBeGreaterThan(3800);
  expect(leases[5]!.held).toBe(true);
});

test('sessions due together go in one call per tick while calls answer', async () => {
  const s = sessions();
  const locks = createLocks(s.backend);
  open.push(locks);
  // three sessions (two leases on `a`), all due within half an interval of each other
  const leases = [
    await locks.acquire('a1', { ttl: 600 }),
    await locks.acquire('b1', { ttl: 600 }),
    await locks.acquire('c1', { ttl: 600 }),
    await locks.acquire('a2', { ttl: 600 }), // same session as a1
  ];
  await s.calls(6); // ~1.2 s: six ticks
  expect(s.sent.slice(0, 6)).toEqual(Array(6).fill(['a', 'b', 'c']));
  expect(leases.every((l) => l.held)).toBe(true);
});

test('a session that comes due while a slow call is in flight joins the next call: no extra call when nothing hangs', async () => {
  // every renewal answers, after 1.5 s; `b` and `c` come due while `a`'s call is on its way, long
  // before they are urgent (a renewal interval late): they wait for it, then go together
  const s = sessions({ delayMs: 1500 });
  const locks = createLocks(s.backend);
  open.push(locks);
  const t0 = performance.now();
  const at = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, t0 + ms - performance.now())));
  const a = await locks.acquire('a', { ttl: 3000 }); // due at 1 s: its call answers at ~2.5 s
  await at(900);
  const b = await locks.acquire('b', { ttl: 3000 }); // due at ~1.9 s, urgent at ~2.9 s
  await at(1000);
  const c = await locks.acquire('c', { ttl: 3000 }); // due at ~2.0 s, urgent at ~3.0 s
  await s.calls(2);
  // (a is due again too: its renewal counts from its send, 1.5 s before the answer)
  expect(s.sent).toEqual([['a'], ['a', 'b', 'c']]);
  expect([a.held, b.held, c.held]).toEqual([true, true, true]);
});
