/**
 * runExclusive's lockAtLeastFor window when the call that keeps it fails (a dropped connection, an
 * opTimeout under load): its outcome is unknown, but the lock's stored expiry is either the
 * window's (the extend went through) or lockAtMostFor from the grant (it did not), and both last
 * at least until the window ends. Releasing the lock instead let another instance run the job
 * again inside the window ("no second run within lockAtLeastFor" broken by one failed call).
 * On the memory backend behind a wrapper whose `extend` fails when told to.
 */
import { afterEach, expect, test } from 'vitest';
import type { Backend, ExtendItem } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { createLocks, type Locks } from '../../src/index.js';

const open: Locks[] = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});

/** The memory backend over `store` whose `extend` calls reject while `failing.on` is set. */
function failingExtend(store: MemoryStore, failing: { on: boolean }): Backend {
  const inner = memory({ store });
  return {
    name: 'failing-extend',
    capabilities: inner.capabilities,
    acquire: (k, r) => inner.acquire(k, r),
    extend: (items: readonly ExtendItem[]) =>
      failing.on ? Promise.reject(new Error('connection dropped')) : inner.extend(items),
    release: (k, t) => inner.release(k, t),
    inspect: (k) => inner.inspect(k),
    close: () => inner.close(),
  };
}

test('a window whose extend fails is still kept: no second run inside lockAtLeastFor', async () => {
  const store = new MemoryStore();
  const failing = { on: true };
  const a = createLocks(failingExtend(store, failing));
  const b = createLocks(memory({ store }));
  open.push(a, b);
  const opts = { lockAtLeastFor: '1m', lockAtMostFor: '5m' };
  expect(await a.runExclusive('nightly', () => 'a ran', opts)).toEqual({ ran: true, value: 'a ran' });
  // the window's extend failed: the lock is left to its stored expiry (lockAtMostFor from the grant)
  expect(await b.runExclusive('nightly', () => 'b ran', opts)).toEqual({ ran: false });
  const info = await b.inspect('nightly');
  expect(info!.remainingMs).toBeGreaterThan(50_000);
  expect(info!.remainingMs).toBeLessThanOrEqual(300_000);
});
