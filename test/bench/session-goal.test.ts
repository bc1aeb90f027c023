/**
 * P6 (bench/report/goals.ts): issue #17's "100,000 session leases cost no more than 10,000",
 * decided from the rounds paired, on hand-made rounds; and runs stored before the rounds existed.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { goals } from '../../bench/report/goals.js';
import { markdown } from '../../bench/report/markdown.js';
import type { Results } from '../../bench/report/types.js';
import type { ScaleResult, ScaleWindow } from '../../bench/scale-child.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
/** run 18, the last full run before the rounds: one 30 s window per session row */
const run18 = () => JSON.parse(readFileSync(join(root, 'bench/results/2026-12-05-vm-run18.json'), 'utf8')) as Results;

const win = (client: number, redis: number): ScaleWindow => ({
  windowMs: 20_000,
  redisCommandsPerSec: 3,
  redisCpuPct: redis,
  redisUserPct: redis / 2,
  redisSysPct: redis / 2,
  roundTripsPerSec: 1,
  roundTripsPerTick: 1,
  renewalsPerSec: 1,
  clientCpuPct: client,
  userCpuPct: client / 2,
  sysCpuPct: client / 2,
  heapPeakMB: 10,
  lost: 0,
});

/** one row: its client CPU in each round, Redis CPU a fixed 0.2 % (so only client CPU differs) */
function row(n: number, control: boolean, client: number[], lost = 0): ScaleResult {
  return {
    lib: 'leasehold-session',
    n,
    ...(control ? { control: true } : {}),
    ttlMs: 3000,
    renewEveryMs: 1000,
    acquireAllMs: 1,
    windowMs: 20_000,
    redisCommandsPerSec: 3,
    redisCpuPct: 0.2,
    roundTripsPerSec: 1,
    roundTripsPerTick: 1,
    renewalsPerSec: 1,
    clientCpuPct: client[0]!,
    heapBeforeMB: 1,
    heapHeldMB: 2,
    heapPeakMB: 2,
    rssMB: 3,
    lost,
    releaseAllMs: 1,
    rounds: client.map((c) => win(c, 0.2)),
  };
}

/** Renewing 100,000 costs `d[i]` % more client CPU than renewing 10,000 in round i. */
function results(d: number[], lost = 0): Results {
  const flat = d.map(() => 0.4);
  return {
    meta: {} as Results['meta'],
    goals: [],
    scale: {
      n: 10_000,
      windowMs: 30_000,
      ttlMs: 3000,
      port: 1,
      results: [
        row(
          10_000,
          false,
          d.map(() => 0.6),
        ),
        row(10_000, true, flat),
        row(
          100_000,
          false,
          d.map((x) => 0.6 + x),
          lost,
        ),
        row(100_000, true, flat),
      ],
      failures: [],
      session: { rounds: d.length, windowMs: 20_000, warmupMs: 5_000, simultaneous: true },
    },
    errors: [],
  };
}
const p6 = (r: Results) => goals(r).find((g) => g.id === 'P6')!;

describe('P6, 100,000 session leases cost no more to renew than 10,000', () => {
  test('a median paired difference ≤ 0 is met, and not called noise', () => {
    const g = p6(results([-0.05, 0.02, -0.01, 0.03, -0.02, -0.04]));
    expect(g.met).toBe(true);
    expect(g.qualifier).toBeUndefined();
    expect(g.measured).toMatch(/^the median difference is ≤ 0/);
  });

  test('a median above 0 with a round at or below 0 is met within the noise, and says so', () => {
    const g = p6(results([0.05, 0.02, -0.01, 0.03, 0.04, 0.06]));
    expect(g.met).toBe(true);
    expect(g.qualifier).toBe('within the noise');
    expect(g.measured).toMatch(/^within the noise: .*\(client CPU: median \+0\.035, 1 of 6 rounds ≤ 0; both: /);
    expect(g.measured).toContain('client CPU +0.050, +0.020, -0.010, +0.030, +0.040, +0.060');
    const r = { ...results([0.05, 0.02, -0.01, 0.03, 0.04, 0.06]), meta: run18().meta };
    r.goals = goals(r);
    expect(markdown(r, 'chart.svg')).toContain('**met** (within the noise)');
  });

  test('more in every round is missed, however small', () => {
    const g = p6(results([0.001, 0.002, 0.001, 0.003, 0.001, 0.002]));
    expect(g.met).toBe(false);
    expect(g.measured).toMatch(
      /^above the noise: 100000 cost more to renew than 10000 in every round \(client CPU, both\)/,
    );
  });

  test('a lost lease is missed', () => {
    expect(p6(results([-0.05, -0.02, -0.01, -0.03, -0.02, -0.04], 1)).met).toBe(false);
  });

  test('runs stored before the rounds (one window per row) are not measured, and their JSON still reads', () => {
    const stored = run18();
    expect(p6(stored).met).toBeNull();
    expect(goals(stored).map((g) => g.id)).toEqual(['P1', 'P2', 'P3', 'P4', 'P5', 'P6']);
    // its stored verdicts (the README's) are P1–P5 only and unchanged
    expect(stored.goals.map((g) => g.id)).toEqual(['P1', 'P2', 'P3', 'P4', 'P5']);
    stored.goals = goals(stored);
    expect(markdown(stored, 'chart.svg')).toContain('renewing them (the row minus its control)');
  });
});
