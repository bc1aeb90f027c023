/** withOptimisticRetry, backend-neutral: retries on `false`, backoff, limits, validation. */
import { describe, expect, test } from 'vitest';
import { withOptimisticRetry } from '../../src/recipes/optimistic.js';
import { ConflictError, InvalidArgumentError } from '../../src/errors.js';

describe('withOptimisticRetry', () => {
  test('returns the first result that is not false, passing the attempt number', async () => {
    const seen: number[] = [];
    const out = await withOptimisticRetry((n) => (seen.push(n), n < 3 ? false : `won on ${n}`), {
      backoff: { minDelay: 1, maxDelay: 2 },
    });
    expect(out).toBe('won on 3');
    expect(seen).toEqual([1, 2, 3]);
    // falsy values other than false are results, not conflicts
    for (const v of [null, undefined, 0, '', Number.NaN]) {
      let calls = 0;
      expect(await withOptimisticRetry(async () => (calls++, v))).toBe(v);
      expect(calls).toBe(1);
    }
  });

  test('throws ConflictError after maxAttempts conflicts (default 5)', async () => {
    let calls = 0;
    const err = await withOptimisticRetry(() => (calls++, false), { backoff: { minDelay: 1, maxDelay: 1 } }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).attempts).toBe(5);
    expect(calls).toBe(5);
    calls = 0;
    await expect(withOptimisticRetry(async () => (calls++, false), { maxAttempts: 1 })).rejects.toBeInstanceOf(
      ConflictError,
    );
    expect(calls).toBe(1);
  });

  test('an attempt that throws is not retried', async () => {
    let calls = 0;
    const boom = new Error('boom');
    await expect(
      withOptimisticRetry(() => {
        calls++;
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(calls).toBe(1);
  });

  test('waits a jittered, capped backoff between attempts', async () => {
    const at: number[] = [];
    await withOptimisticRetry(() => (at.push(performance.now()), at.length < 6 ? false : true), {
      maxAttempts: 6,
      backoff: { minDelay: 20, maxDelay: 40, factor: 2 },
    });
    const gaps = at.slice(1).map((t, i) => t - at[i]!);
    for (const g of gaps) {
      expect(g).toBeGreaterThanOrEqual(19); // timers may fire up to 1ms early in Node's accounting
      expect(g).toBeLessThan(40 + 40); // the cap, plus timer slack on a busy machine
    }
  });

  test('an aborted signal stops the retries with its reason', async () => {
    const ctrl = new AbortController();
    const reason = new Error('stop');
    let calls = 0;
    const p = withOptimisticRetry(
      () => {
        calls++;
        if (calls === 2) ctrl.abort(reason);
        return false;
      },
      { maxAttempts: 100, backoff: { minDelay: 1, maxDelay: 5 }, signal: ctrl.signal },
    );
    await expect(p).rejects.toBe(reason);
    expect(calls).toBe(2);
  });

  test('bad arguments are rejected before the first attempt', async () => {
    let calls = 0;
    const attempt = () => (calls++, true);
    const bad: unknown[] = [
      { maxAttempts: 0 },
      { maxAttempts: 1.5 },
      { maxAttempts: '3' },
      { maxAttempts: 1001 },
      { backoff: { minDelay: -1 } },
      { backoff: { minDelay: 50, maxDelay: 10 } },
      { backoff: { factor: 0.5 } },
      { backoff: { jitter: true } },
      { retries: 3 },
      { signal: 'nope' },
      'fast',
    ];
    for (const opts of bad) {
      await expect(withOptimisticRetry(attempt, opts as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(withOptimisticRetry('nope' as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(calls).toBe(0);
    // the messages name the option the caller passed (they said retry, an option it does not have)
    await expect(withOptimisticRetry(attempt, { backoff: { jitter: 1 } } as never)).rejects.toThrow(
      'withOptimisticRetry.backoff: unknown option "jitter"',
    );
    await expect(withOptimisticRetry(attempt, { backoff: { minDelay: 100, maxDelay: 10 } })).rejects.toThrow(
      'backoff.maxDelay must be ≥ backoff.minDelay',
    );
    await expect(withOptimisticRetry(attempt, { backoff: { minDelay: 0 } })).rejects.toThrow(/^backoff\.minDelay/);
  });
});
