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

test('a client that stops answering gets at most 4 renewal calls in flight, each for leases no other call could renew in time', async () => {
  const h = hanging(() => true);
  const locks = createLocks(h.backend);
  open.push(locks);
  // each lease is acquired once the renewal of the one before is hanging, and its deadline comes
  // before that call is given up: each needs a call of its own, until 4 are in flight
  const leases: Lease[] = [];
  for (const [i, ttl] of [4000, 2000, 1000, 500].entries()) {
    leases.push(await locks.acquire(`l${i}`, { ttl }));
    await Promise.race([h.calls(i + 1), lost(leases[i]!)]);
    expect(h.sent[i]).toEqual([`l${i}`]);
  }
  const fifth = await locks.acquire('l4', { ttl: 120 }); // due in 40 ms, lost before any call is given up
  await lost(fifth);
  expect(fifth.signal.reason).toBeInstanceOf(LeaseLostError);
  expect(h.sent).toHaveLength(4); // its renewal waited: a fifth call was not sent
  await Promise.all(leases.map(lost));
});
