/**
 * The bounds every call keeps while its server does not answer (issue #9), checked the same way
 * for every backend: with the server frozen, `acquire` with `wait`, `acquire` with `signal`,
 * `tryAcquire`, `extend` and `close()` each settle within their bound plus MARGIN, and a lease
 * whose renewal hangs is lost at its deadline (held false and signal aborted together).
 */
import { expect } from 'vitest';
import { LeaseholdError, LeaseLostError, LockTimeoutError, type Lease, type Locks } from '../../src/index.js';

/** The Locks' opTimeout in these tests. */
export const OP = 600;
export const WAIT = 300;
export const SIGNAL = 200;
/** A TTL short enough that a hung renewal must lose the lease within the test. */
export const SHORT_TTL = 900;
/** Slack for timers on a loaded 2-core machine (other engineers' suites run beside ours). */
export const MARGIN = 300;

export interface Timed {
  ms: number;
  error?: unknown;
  value?: unknown;
}

export async function timed(p: Promise<unknown>): Promise<Timed> {
  const t0 = performance.now();
  try {
    return { ms: performance.now() - t0, value: await p };
  } catch (error) {
    return { ms: performance.now() - t0, error };
  }
}

const describe = (r: Timed) =>
  `${Math.round(r.ms)}ms, ${r.error ? `${(r.error as Error).name}: ${(r.error as Error).message}` : `value ${String(r.value)}`}`;

/**
 * Runs the calls against a frozen server (`freeze` has just been called) and checks their
 * bounds. `held` is a lease (long TTL) taken before the freeze; `short` one with SHORT_TTL.
 * Returns the keys the calls tried, so the caller can check later that nothing was left held.
 */
export async function expectBoundsWhileFrozen(locks: Locks, held: Lease, short: Lease): Promise<string[]> {
  const frozenAt = performance.now();
  const lost = new Promise<number>((r) =>
    short.signal.addEventListener('abort', () => r(performance.now()), { once: true }),
  );
  const [wait, signal, tryA, extend] = await Promise.all([
    timed(locks.acquire('frozen-wait', { wait: WAIT })),
    timed(locks.acquire('frozen-signal', { signal: AbortSignal.timeout(SIGNAL) })),
    timed(locks.tryAcquire('frozen-try')),
    timed(held.extend()),
  ]);
  expect(wait.error, describe(wait)).toBeInstanceOf(LockTimeoutError);
  expect(wait.ms, describe(wait)).toBeLessThan(WAIT + MARGIN);
  expect((signal.error as Error)?.name, describe(signal)).toBe('TimeoutError'); // the signal's own reason
  expect(signal.ms, describe(signal)).toBeLessThan(SIGNAL + MARGIN);
  for (const r of [tryA, extend]) {
    expect(r.error, describe(r)).toBeInstanceOf(LeaseholdError);
    expect(r.ms, describe(r)).toBeLessThan(OP + MARGIN);
  }
  // the short lease's renewal hangs: it is lost at its deadline, not when the call gives up
  const lostAt = await lost;
  expect(short.signal.reason).toBeInstanceOf(LeaseLostError);
  expect(short.held).toBe(false);
  expect(lostAt - frozenAt).toBeLessThan(SHORT_TTL + MARGIN);
  // close(): releases (bounded by opTimeout), then closes the backend (bounded by opTimeout)
  const closed = await timed(locks.close());
  expect(closed.error, describe(closed)).toBeUndefined();
  expect(closed.ms, describe(closed)).toBeLessThan(2 * OP + MARGIN);
  return ['frozen-wait', 'frozen-signal', 'frozen-try'];
}

/** Polls `check` until it holds (a state, never a duration); throws after `ms`. */
export async function eventually(check: () => Promise<boolean> | boolean, ms: number, what: string): Promise<void> {
  const end = performance.now() + ms;
  for (;;) {
    if (await check()) return;
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
