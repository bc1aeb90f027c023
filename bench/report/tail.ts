/** A contended row's tail, beside its p99: with 250 grants per worker a poller's p99 sits at the
 * knee of its tail and swings between runs, so p99.9 and the share of long waits say more. */
import type { ContendedRun } from '../sections/contended.js';

export interface Tail {
  /** wait p99.9, ms */
  p999: number;
  /** share of waits longer than 50 ms, 0..1 */
  over50: number;
  /** over50 read off the stored quantiles (results from before it was counted) */
  estimated: boolean;
}

export function tailOf(run: ContendedRun): Tail {
  const p999 = run.cdf.find(([q]) => q === 0.999)?.[1] ?? NaN;
  if (run.over50ms !== undefined) return { p999, over50: run.over50ms, estimated: false };
  // the largest stored quantile at or below 50 ms: the share above it is at most 1 - q
  let q50 = 0;
  for (const [q, v] of run.cdf) if (v <= 50 && q > q50) q50 = q;
  return { p999, over50: Math.max(0, 1 - q50), estimated: true };
}

/** "1.2 %" ("≤ 1.5 %" when estimated from the quantiles) */
export function pct(t: Tail): string {
  const v = Math.round(t.over50 * 1000) / 10;
  return t.estimated && v > 0 ? `≤ ${v} %` : `${v} %`;
}
