/**
 * Issue #17's session comparison, paired by round (bench/sections/scale-session.ts): what the P6
 * verdict (goals.ts) and the report's session table and bullets (markdown.ts) are made of.
 */
import type { ScaleResult, ScaleWindow } from '../scale-child.js';
import type { ScaleSection } from '../sections/scale.js';
import { median } from '../lib/stats.js';

/** One figure over the rounds: its median and its spread (min–max). */
export interface Spread {
  median: number;
  min: number;
  max: number;
  values: number[];
}

export function spread(values: number[]): Spread {
  return { median: median(values), min: Math.min(...values), max: Math.max(...values), values };
}

/** Client CPU, Redis CPU, and the two together (% of one core). */
export interface Cpu<T> {
  client: T;
  redis: T;
  both: T;
}

export interface SessionComparison {
  /** the smaller count (n); the larger is 10 × n */
  n: number;
  big: number;
  rounds: number;
  windowMs: number;
  small: { row: ScaleResult; control: ScaleResult };
  large: { row: ScaleResult; control: ScaleResult };
  /** per round, row − its control: what renewing costs at n and at 10 × n */
  renewSmall: Cpu<Spread>;
  renewLarge: Cpu<Spread>;
  /** per round, (10n row − its control) − (n row − its control): what the verdict is decided on */
  renewDiff: Cpu<Spread>;
  /** per round, 10n row − n row: the totals, holding at rest included (reported, not scored) */
  totalDiff: Cpu<Spread>;
  /** leases lost in any window of either row */
  lost: number;
}

const cpu = (w: ScaleWindow): Cpu<number> => ({
  client: w.clientCpuPct,
  redis: w.redisCpuPct,
  both: w.clientCpuPct + w.redisCpuPct,
});

function perRound(f: (k: keyof Cpu<number>, i: number) => number, rounds: number): Cpu<Spread> {
  const of = (k: keyof Cpu<number>) => spread(Array.from({ length: rounds }, (_, i) => f(k, i)));
  return { client: of('client'), redis: of('redis'), both: of('both') };
}

/** The four session rows measured in rounds, paired; null when a run has them not (runs before 2026-12-05). */
export function sessionComparison(s: ScaleSection | undefined): SessionComparison | null {
  if (!s?.session) return null;
  const ses = s.results.filter((x) => x.lib === 'leasehold-session' && x.rounds?.length);
  const counts = [...new Set(ses.map((x) => x.n))].sort((a, b) => a - b);
  if (counts.length !== 2) return null;
  const find = (n: number, control: boolean) => ses.find((x) => x.n === n && !!x.control === control);
  const [n, big] = counts as [number, number];
  const [sr, sc, lr, lc] = [find(n, false), find(n, true), find(big, false), find(big, true)];
  if (!sr || !sc || !lr || !lc) return null;
  const rounds = Math.min(...[sr, sc, lr, lc].map((x) => x.rounds!.length));
  const at = (x: ScaleResult, k: keyof Cpu<number>, i: number) => cpu(x.rounds![i]!)[k];
  return {
    n,
    big,
    rounds,
    windowMs: s.session.windowMs,
    small: { row: sr, control: sc },
    large: { row: lr, control: lc },
    renewSmall: perRound((k, i) => at(sr, k, i) - at(sc, k, i), rounds),
    renewLarge: perRound((k, i) => at(lr, k, i) - at(lc, k, i), rounds),
    renewDiff: perRound((k, i) => at(lr, k, i) - at(lc, k, i) - (at(sr, k, i) - at(sc, k, i)), rounds),
    totalDiff: perRound((k, i) => at(lr, k, i) - at(sr, k, i), rounds),
    lost: Math.max(sr.lost, lr.lost),
  };
}

/** 3 decimals, with a sign for a difference. */
export const pp = (v: number, signed = false): string =>
  `${signed && v > 0 ? '+' : ''}${(Math.round(v * 1000) / 1000).toFixed(3)}`;
export const spreadText = (x: Spread, signed = false): string =>
  `${pp(x.median, signed)} (${pp(x.min, signed)} to ${pp(x.max, signed)})`;

/** The report's lines for the comparison: a table of the four rows (median, min–max) and the paired figures. */
export function sessionLines(c: SessionComparison, verdict: string): string[] {
  const L: string[] = [];
  const mm = (v: number[]) => spreadText(spread(v));
  L.push(
    `Session renewal (issue #17): ${c.rounds} rounds of ${c.windowMs / 1000} s; in each round the four rows below ` +
      'measure one window at the same time, each child on its own redis-server. Median over the rounds (min to max):',
  );
  L.push('');
  L.push(
    '| Row | Client CPU % | user % | system % | Redis CPU % | Redis user % | Redis system % | Round trips per tick | Lost |',
  );
  L.push('|---|---|---|---|---|---|---|---|---|');
  for (const [label, x] of [
    [`${c.n} leases`, c.small.row],
    [`${c.n} leases, control`, c.small.control],
    [`${c.big} leases`, c.large.row],
    [`${c.big} leases, control`, c.large.control],
  ] as const) {
    const w = x.rounds!.slice(0, c.rounds);
    L.push(
      `| ${label} | ${mm(w.map((y) => y.clientCpuPct))} | ${mm(w.map((y) => y.userCpuPct))} | ${mm(w.map((y) => y.sysCpuPct))} | ` +
        `${mm(w.map((y) => y.redisCpuPct))} | ${mm(w.map((y) => y.redisUserPct))} | ${mm(w.map((y) => y.redisSysPct))} | ` +
        `${x.roundTripsPerTick} | ${x.lost} |`,
    );
  }
  L.push('');
  const rounds = (x: Spread) => x.values.map((v) => pp(v, true)).join(', ');
  L.push(
    `- renewing ${c.n} leases (row − control, per round): client ${spreadText(c.renewSmall.client)} %, Redis ` +
      `${spreadText(c.renewSmall.redis)} %`,
  );
  L.push(
    `- renewing ${c.big} leases (row − control, per round): client ${spreadText(c.renewLarge.client)} %, Redis ` +
      `${spreadText(c.renewLarge.redis)} %`,
  );
  L.push(
    `- renewing ${c.big} − renewing ${c.n}, paired by round: client ${rounds(c.renewDiff.client)}; Redis ` +
      `${rounds(c.renewDiff.redis)}; both ${rounds(c.renewDiff.both)} (% of a core)`,
  );
  L.push(
    `- the totals (${c.big} row − ${c.n} row, holding at rest included, not scored), paired by round: client ` +
      `${spreadText(c.totalDiff.client, true)} %, Redis ${spreadText(c.totalDiff.redis, true)} %`,
  );
  L.push(`- P6: ${verdict}`);
  return L;
}
