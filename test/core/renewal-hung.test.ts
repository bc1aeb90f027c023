/**
 * A renewal call that hangs (one stuck connection of a pool, one slow Redlock node, a driver whose
 * calls fail one by one) costs only the leases it carries: a lease that is not in it is renewed by
 * a call of its own, and the calls in flight stay bounded when the client stops answering. On the
 * memory backend behind a wrapper that holds chosen `extend` calls forever: the core's scheduling.
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

/** The memory backend whose `extend` calls hang when `hang(items)` says so; `sent` lists each call's keys. */
function hanging(hang: (keys: string[]) => boolean) {
  const inner = memory({ store: new MemoryStore() });
  const sent: string[][] = [];
  const waiters: Array<() => void> = [];
  const backend: Backend = {
    name: 'hanging',
    capabilities: inner.capabilities,
    acquire: (k, r) => inner.acquire(k, r),
    extend: (items: readonly ExtendItem[]) => {
      const keys = items.map((i) => i.key.slice(i.key.lastIndexOf(':') + 1));
      sent.push(keys);
      for (const w of waiters.splice(0)) w();
      if (!hang(keys)) return inner.extend(items);
      return new Promise((_, reject) => held.push(() => reject(new Error('connection dropped'))));
    },
    release: (k, t) => inner.release(k, t),
    inspect: (k) => inner.inspect(k),
    close: () => inner.close(),
  };
  /** Resolves once `n` extend calls have been sent. */
  const calls = async (n: number) => {
    while (sent.length < n) await new Promise<void>((r) => waiters.push(r));
  };
  return { backend, sent, calls };
}

const lost = (l: Lease) => new Promise((r) => l.signal.addEventListener('abort', r, { once: true }));

test('a hung renewal of a long lease does not hold back a short lease acquired since', async () => {
  // the renewal of `long` never answers; every other renewal does (opTimeout: its default, 5 s)
  const h = hanging((keys) => keys.includes('long'));
  const locks = createLocks(h.backend);
  open.push(locks);
  const long = await locks.acquire('long', { ttl: 3000 }); // renewed after 1 s, that call hangs ~2 s
  await h.calls(1);
  expect(h.sent[0]).toEqual(['long']);
  const short = await locks.acquire('short', { ttl: 600 }); // due in 200 ms, lost in 600 ms unless renewed
  await Promise.race([h.calls(4), lost(short)]); // three renewals of `short` answered while `long`'s hangs
  expect(short.held).toBe(true);
  expect(h.sent.slice(1).every((keys) => keys.length === 1 && keys[0] === 'short')).toBe(true);
  await lost(long); // its own renewal hung: lost at its deadline
  expect(long.signal.reason).toBeInstanceOf(LeaseLostError);
  expect(short.held).toBe(true);
  expect((await locks.inspect('short'))?.fence).toBe(short.fence);
});

test('a lease that comes due while a slow call is in flight joins the next call: no extra call when nothing hangs', async () => {
  // every renewal answers, after 1.5 s; `l1` and `l2` come due while `l0`'s call is on its way,
  // long before they are urgent (a renewal interval late): they wait for it, then go together
  // (sent at once in a call of their own, [l1, l2] went while l0's call was in flight: two calls in flight)
  const inner = memory({ store: new MemoryStore() });
  const sent: string[][] = [];
  const backend: Backend = {
    name: 'slow',
    capabilities: inner.capabilities,
    acquire: (k, r) => inner.acquire(k, r),
    extend: async (items: readonly ExtendItem[]) => {
      sent.push(items.map((i) => i.key.slice(i.key.lastIndexOf(':') + 1)));
      await new Promise((r) => setTimeout(r, 1500));
      return inner.extend(items);
    },
    release: (k, t) => inner.release(k, t),
    inspect: (k) => inner.inspect(k),
    close: () => inner.close(),
  };
  const locks = createLocks(backend);
  open.push(locks);
  const t0 = performance.now();
  const at = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, t0 + ms - performance.now())));
  const l0 = await locks.acquire('l0', { ttl: 3000 }); // due at 1 s: its call answers at ~2.5 s
  await at(900);
  const l1 = await locks.acquire('l1', { ttl: 3000 }); // due at ~1.9 s, urgent at ~2.9 s
  await at(1000);
  const l2 = await locks.acquire('l2', { ttl: 3000 }); // due at ~2.0 s, urgent at ~3.0 s
  while (sent.length < 2) await at(performance.now() - t0 + 50);
  // (l0 is due again too: its renewal counts from its send, 1.5 s before the answer)
  expect(sent).toEqual([['l0'], ['l0', 'l1', 'l2']]);
  expect([l0.held, l1.held, l2.held]).toEqual([true, true, true]);
});
