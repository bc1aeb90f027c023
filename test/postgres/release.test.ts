/**
 * Leases granted out of the server's queue live on waiter connections; released one after the
 * other, the second connection is given back to the pool (one spare is kept). Each release must
 * still let go of its own lock and wake the key's watchers (its NOTIFY), the connection given back
 * only after the release answered.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { createLocks } from '../../src/index.js';
import { advisoryKey, lockParts, postgres } from '../../src/backends/postgres/index.js';
import { KINDS, Pg } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());

/** Resolves when `n` sessions wait (not granted) for the lock of `fullKey`. */
async function queued(fullKey: string, n: number): Promise<void> {
  const { classid, objid } = lockParts(advisoryKey(fullKey));
  const admin = await env.admin();
  const until = performance.now() + 5000;
  const sql = `select count(*)::int as n from pg_locks where locktype = 'advisory' and classid = $1::int8::oid
    and objid = $2::int8::oid and objsubid = 1 and not granted`;
  while ((await admin.query(sql, [classid, objid])).rows[0].n < n) {
    if (performance.now() > until) throw new Error(`nobody is waiting for ${fullKey}`);
  }
}

describe.each(KINDS)('releases of leases from the server queue (%s)', (kind) => {
  test('two released one after the other: both true, and the second wakes its watcher', async () => {
    const prefix = `rel-${randomUUID().slice(0, 8)}`;
    const A = createLocks(postgres(await env.client(kind, 6)), { prefix, ttl: '30s' });
    const backB = postgres(await env.client(kind, 6));
    const B = createLocks(backB, { prefix, ttl: '30s' });
    const watcher = postgres(await env.client(kind, 4));
    try {
      const a1 = await A.acquire('k1');
      const a2 = await A.acquire('k2');
      const w1 = B.acquire('k1', { wait: '10s' });
      const w2 = B.acquire('k2', { wait: '10s' });
      await queued(`${prefix}:k1`, 1);
      await queued(`${prefix}:k2`, 1);
      await a1.release();
      await a2.release();
      const [b1, b2] = await Promise.all([w1, w2]);
      expect(backB.stats.queueGrants).toBe(2); // each on a waiter connection of its own
      await (backB as unknown as { written(): Promise<void> }).written(); // no '+' NOTIFY left to come
      let changes = 0;
      let changed = () => {};
      const stop = await watcher.watch(`${prefix}:k2`, () => {
        changes++;
        changed();
      });
      expect(await b1.release()).toBe(true);
      const woken = new Promise<void>((r) => (changed = r));
      const before = changes;
      expect(await b2.release()).toBe(true);
      await Promise.race([
        woken,
        new Promise((_, reject) => setTimeout(() => reject(new Error('the watcher was not woken')), 3000)),
      ]);
      expect(changes).toBeGreaterThan(before);
      stop();
      // both locks are free, and B's connections are back with nothing of ours on them
      expect(await env.holders(`${prefix}:k1`)).toEqual([]);
      expect(await env.holders(`${prefix}:k2`)).toEqual([]);
    } finally {
      await A.close();
      await B.close();
      await watcher.close();
    }
  });
});
