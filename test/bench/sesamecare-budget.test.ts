/**
 * bench's sesamecare subject in a contended run (bench/lib/subjects.ts): only a retry window that
 * ran out near the deadline with the key still locked is "budget spent" (an incomplete run); any
 * other failure is an error of its own. On the real Redis 6379.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { ioredis, quit } from '../../bench/lib/clients.js';
import { BudgetSpent, sesamecareSubject } from '../../bench/lib/subjects.js';
import type { Redis } from 'ioredis';

const times = { ttlMs: 5000, waitMs: 45_000 };
let admin: Redis;
beforeAll(async () => {
  admin = await ioredis(6379);
});
afterAll(async () => {
  await quit(admin);
});

test('a key held by someone else for the whole budget: BudgetSpent, with the cause kept', async () => {
  const key = `bench-test:sesamecare:${randomBytes(6).toString('hex')}`;
  await admin.set(key, 'someone', 'PX', 10_000);
  const c = await ioredis(6379);
  try {
    const s = sesamecareSubject('sesamecare', [c], times, true);
    const e = await s.acquire(key, 1200).then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(BudgetSpent);
    expect(((e as BudgetSpent).cause as Error).name).toBe('ExecutionError');
  } finally {
    await admin.del(key);
    await quit(c);
  }
});

test('a closed connection is an error, not a spent budget', async () => {
  const c = await ioredis(6379);
  c.disconnect();
  const s = sesamecareSubject('sesamecare', [c], times, true);
  const e = await s.acquire(`bench-test:sesamecare:${randomBytes(6).toString('hex')}`, 1200).then(
    () => null,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(Error);
  expect(e).not.toBeInstanceOf(BudgetSpent);
});
