/** Sample collection and summaries. All times are milliseconds from performance.now(). */

export const now = (): number => performance.now();

/** Wall-clock-comparable high-resolution time (ms since the epoch), for ordering across processes. */
export const epochNow = (): number => performance.timeOrigin + performance.now();

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export interface Summary {
  n: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  min: number;
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function summarize(samples: ArrayLike<number>): Summary {
  const s = Float64Array.from(samples as ArrayLike<number>).sort();
  let sum = 0;
  for (let i = 0; i < s.length; i++) sum += s[i]!;
  return {
    n: s.length,
    mean: s.length ? sum / s.length : NaN,
    p50: percentile(s, 50),
    p90: percentile(s, 90),
    p99: percentile(s, 99),
    max: s.length ? s[s.length - 1]! : NaN,
    min: s.length ? s[0]! : NaN,
  };
}

/** A growable array of numbers. */
export class Samples {
  private buf = new Float64Array(1024);
  length = 0;
  push(v: number): void {
    if (this.length === this.buf.length) {
      const next = new Float64Array(this.buf.length * 2);
      next.set(this.buf);
      this.buf = next;
    }
    this.buf[this.length++] = v;
  }
  pushAll(vs: ArrayLike<number>): void {
    for (let i = 0; i < vs.length; i++) this.push(vs[i]!);
  }
  values(): Float64Array {
    return this.buf.subarray(0, this.length);
  }
}

/** The median of `v` (the mean of the middle two for an even count; NaN for none). */
export function median(v: number[]): number {
  if (v.length === 0) return NaN;
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Rounds for JSON and tables: 3 significant decimals below 10, fewer above. */
export function round(v: number): number {
  if (!Number.isFinite(v)) return v;
  const a = Math.abs(v);
  const d = a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : 3;
  const f = 10 ** d;
  return Math.round(v * f) / f;
}

export function roundSummary(s: Summary): Summary {
  return {
    n: s.n,
    mean: round(s.mean),
    p50: round(s.p50),
    p90: round(s.p90),
    p99: round(s.p99),
    max: round(s.max),
    min: round(s.min),
  };
}

/** Resolves with `p`, or rejects with a timeout error after `ms`. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms}ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

export const errText = (e: unknown): string => (e instanceof Error ? e.message : String(e));
