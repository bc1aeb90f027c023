/**
 * The bench's goal verdicts (bench/report/goals.ts) on hand-made results: which floor and which
 * peers a verdict compares against.
 */
import { describe, expect, test } from 'vitest';
import { goals, subjectErrors } from '../../bench/report/goals.js';
import { interleaved } from '../../bench/lib/measure.js';
import { ioredis, quit } from '../../bench/lib/clients.js';
import type { Subject } from '../../bench/lib/subjects.js';
import type { ContendedRun } from '../../bench/sections/contended.js';
import type { Results } from '../../bench/report/types.js';
import type { LatencyResult } from '../../bench/lib/measure.js';
import { NAMES } from '../../bench/sections/uncontended.js';

const summary = (p50: number) => ({ n: 100, mean: p50, p50, p90: p50, p99: p50, max: p50, min: p50 });
/** one subject: `opsPerSec` and a p50 (ms) in each of 3 rounds */
function lr(name: string, opsPerSec: number, p50 = 1000 / opsPerSec, errors = 0): LatencyResult {
  return {
    name,
    lanes: 1,
    ops: opsPerSec,
    opsPerSec,
    elapsedMs: 1000,
    total: summary(p50),
    acquire: summary(p50 / 2),
    release: summary(p50 / 2),
    errors,
    rounds: {
      p50: [p50, p50, p50],
      acquireP50: [p50 / 2, p50 / 2, p50 / 2],
      opsPerSec: [opsPerSec, opsPerSec, opsPerSec],
    },
  };
}

function results(parallel: LatencyResult[], sequential?: LatencyResult[]): Results {
  return {
    meta: {} as Results['meta'],
    goals: [],
    uncontended: {
      port: 6379,
      sequential: sequential ?? [
        lr(NAMES.floor, 1000),
        lr(NAMES.ours, 1000),
        lr(NAMES.sesamecare, 900),
        lr(NAMES.semaphore, 900),
      ],
      parallel,
    },
    errors: [],
  };
}
const p1 = (r: Results) => goals(r).find((g) => g.id === 'P1')!;

describe('P1 with 64 keys', () => {
  test('is judged against the floor on a batching client: faster than the plain floor, slower than the batched one, is a miss', () => {
    const g = p1(
      results([
        lr(NAMES.batchedFloor, 30_000),
        lr(NAMES.floor, 20_000),
        lr(NAMES.ours, 25_000),
        lr(NAMES.sesamecare, 10_000),
        lr(NAMES.semaphore, 10_000),
      ]),
    );
    expect(g.measured).toContain("64 keys: 1.2× the batched floor's time per op");
    expect(g.measured).toContain("64 keys vs the plain client's floor: 0.8×");
    expect(g.met).toBe(false);
  });

  test('counts the peers on batching clients: a peer faster there is a miss', () => {
    const g = p1(
      results([
        lr(NAMES.batchedFloor, 25_000),
        lr(NAMES.floor, 20_000),
        lr(NAMES.ours, 25_000),
        lr(NAMES.sesamecare, 10_000),
        lr(NAMES.semaphore, 10_000),
        lr(NAMES.semaphoreBatched, 26_000),
      ]),
    );
    expect(g.measured).toContain('0.962× with 64 keys');
    expect(g.met).toBe(false);
  });

  test('met when at the batched floor and ahead of every peer on either client', () => {
    const g = p1(
      results([
        lr(NAMES.batchedFloor, 25_000),
        lr(NAMES.floor, 20_000),
        lr(NAMES.ours, 25_000),
        lr(NAMES.sesamecare, 10_000),
        lr(NAMES.semaphore, 10_000),
        lr(NAMES.sesamecareBatched, 20_000),
        lr(NAMES.semaphoreBatched, 20_000),
      ]),
    );
    expect(g.met).toBe(true);
  });

  test('an old run without the batched floor is judged against the plain one, and says so', () => {
    const g = p1(results([lr(NAMES.floor, 20_000), lr(NAMES.ours, 25_000), lr(NAMES.semaphore, 10_000)]));
    expect(g.measured).toContain('the plain floor (no batched floor in this run)');
    expect(g.met).toBe(true);
  });
});

describe('errors', () => {
  const clean = () => [
    lr(NAMES.batchedFloor, 25_000),
    lr(NAMES.floor, 20_000),
    lr(NAMES.ours, 25_000),
    lr(NAMES.sesamecare, 10_000),
    lr(NAMES.semaphore, 10_000),
  ];

  test('a verdict is refused when leasehold or a reference it is compared with had errors', () => {
    expect(p1(results(clean())).met).toBe(true);
    const oursFailed = clean().map((s) => (s.name === NAMES.ours ? { ...s, errors: 7 } : s));
    const g = p1(results(oursFailed));
    expect(g.met).toBe(false);
    expect(g.errors).toBe(7);
    expect(g.measured).toMatch(/^not met \(errors: leasehold \(ioredis\) 7\)/);
    const floorFailed = clean().map((s) => (s.name === NAMES.batchedFloor ? { ...s, errors: 2 } : s));
    expect(p1(results(floorFailed))).toMatchObject({ met: false, errors: 2 });
  });

  test('subjectErrors lists every subject with errors, so the run exits non-zero', () => {
    const r = results(clean().map((s) => (s.name === NAMES.semaphore ? { ...s, errors: 3, lastError: 'boom' } : s)));
    expect(subjectErrors(r)).toEqual([{ section: `uncontended ${NAMES.semaphore}`, error: '3 errors; last: boom' }]);
  });

  test("failed operations' latency is recorded (on a real Redis): a subject failing fast does not vanish", async () => {
    const c = await ioredis(6379);
    let n = 0;
    // every other acquire fails after a real round trip to a script that errors
    const flaky: Subject = {
      name: 'flaky',
      async acquire() {
        if (n++ % 2) {
          await c.eval("return redis.error_reply('refused')", 0);
          throw new Error('unreachable');
        }
        await c.ping();
        return { release: async () => {} };
      },
      close: async () => {},
    };
    try {
      const [res] = await interleaved(
        [flaky],
        2,
        () => ({ keys: ['k'], durationMs: 100, maxOps: 1e6 }),
        0,
        () => {},
      );
      expect(res!.errors).toBeGreaterThan(0);
      expect(res!.failed?.n).toBe(res!.errors);
      expect(res!.failed!.p50).toBeGreaterThan(0);
      expect(res!.lastError).toContain('refused');
    } finally {
      await quit(c);
    }
  });
});

describe('P2 tail', () => {
  const run = (lib: ContendedRun['lib'], name: string, p99: number, max: number, over50ms?: number): ContendedRun => ({
    lib,
    name,
    config: '',
    workers: 8,
    grants: 2000,
    elapsedMs: 4000,
    handoffsPerSec: 500,
    wait: { n: 2000, mean: 10, p50: 5, p90: 20, p99, max, min: 0 },
    switchRatio: 1,
    perWorker: [],
    meanHoldMs: 1,
    cpuMsPerGrant: 1,
    commandsPerGrant: 2,
    errors: 0,
    incomplete: false,
    cdf: [
      [0.5, 5],
      [0.98, 40],
      [0.99, p99],
      [0.999, max / 2],
      [1, max],
    ],
    ...(over50ms === undefined ? {} : { over50ms }),
  });

  test("states each row's p99.9 and share of waits over 50 ms, and the max against the peer with the lowest max", () => {
    const r = results([]);
    r.contended = {
      options: {} as NonNullable<Results['contended']>['options'],
      failures: [],
      runs: [
        run('leasehold', 'ours', 30, 45, 0),
        run('sesamecare', 'poller A', 3, 2000, 0.012),
        run('semaphore', 'poller B', 200, 500),
      ],
    };
    const g = goals(r).find((x) => x.id === 'P2')!;
    // the p99 comparison (the target) is unchanged: against the lowest p99
    expect(g.measured).toMatch(/^p99 30 ms vs poller A 3 ms/);
    expect(g.measured).toContain('max 45 ms vs the lowest peer max (poller B) 500 ms: 0.09×');
    expect(g.measured).toContain('poller A p99.9 1000 ms, 1.2 % over 50 ms');
    // no stored count: read off the quantiles, as an upper bound
    expect(g.measured).toContain('poller B p99.9 250 ms, ≤ 2 % over 50 ms');
    expect(g.measured).toContain('ours p99.9 22.5 ms, 0 % over 50 ms');
  });
});
