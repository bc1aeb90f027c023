/**
 * The administrative driver methods behind `leasehold status` and `leasehold release --force`,
 * in the one conformance suite: every backend that has `forceRelease` is held to the same rules.
 */
import { expect, test } from 'vitest';
import type { RecipeContext } from './recipes.js';

const abortedAt = (signal: AbortSignal) =>
  new Promise<number>((r) => {
    if (signal.aborted) return r(performance.now());
    signal.addEventListener('abort', () => r(performance.now()), { once: true });
  });

export function admin({ key, full, locks, raw }: RecipeContext): void {
  test('admin: forceRelease breaks a held lock, says what it broke; the holder loses it, a waiter gets it', async () => {
    const probe = await raw();
    if (!probe.forceRelease) {
      // not offered: the CLI says so (it checks for the method); nothing else to hold it to
      expect(probe.forceRelease).toBeUndefined();
      return;
    }
    const k = key();
    const holder = await locks({ ttl: 900 }); // renewal every 300 ms
    // with a holder value where the backend keeps one: the break says whose lock it was
    const value = probe.capabilities.value ? 'holder-a' : undefined;
    const lease = await holder.acquire(k, value === undefined ? {} : { value });
    const waiter = await locks({ ttl: 900 });
    const waiting = waiter.acquire(k, { wait: '10s' });
    waiting.catch(() => {}); // may reject before it is awaited below
    await waiter.spy.nextRefusal();
    const lostAt = abortedAt(lease.signal);
    const t0 = performance.now();
    const broken = await probe.forceRelease(full(k));
    expect(broken).toMatchObject({ key: full(k), fence: lease.fence });
    expect(broken?.value).toBe(value);
    expect(JSON.stringify(broken, (_, v) => (typeof v === 'bigint' ? String(v) : v))).not.toContain(lease.token);
    const next = await waiting;
    expect(next.fence > lease.fence).toBe(true);
    expect(performance.now() - t0).toBeLessThan(1500);
    expect((await lostAt) - t0).toBeLessThanOrEqual(300 + 300);
    expect(await lease.release()).toBe(false);
    await next.release();
    expect(await probe.forceRelease(full(k))).toBeNull();
    expect(await probe.forceRelease(full(key()))).toBeNull();
  });
}
