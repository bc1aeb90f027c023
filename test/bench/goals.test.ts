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

describe("P2: issue #16's five conditions", () => {
  interface Row {
    p99?: number;
    max?: number;
    rate?: number;
    cpu?: number;
    switchRatio?: number;
    switches?: ContendedRun['switches'];
    over50ms?: number;
  }
  const run = (lib: ContendedRun['lib'], name: string, o: Row = {}): ContendedRun => {
    const { p99 = 8, max = 40, rate = 600, cpu = 0.5, switchRatio = 1, switches, over50ms } = o;
    return {
      lib,
      name,
      config: '',
      workers: 8,
      grants: 2000,
      elapsedMs: 4000,
      handoffsPerSec: rate,
      wait: { n: 2000, mean: 10, p50: 5, p90: 20, p99, max, min: 0 },
      switchRatio,
      ...(switches ? { switches } : {}),
      perWorker: [],
      meanHoldMs: 1,
      cpuMsPerGrant: cpu,
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
    };
  };
  const p2 = (ours: Row, peers: [Row, Row] = [{}, {}]) => {
    const r = results([]);
    r.contended = {
      options: {} as NonNullable<Results['contended']>['options'],
      failures: [],
      runs: [
        run('leasehold', 'ours', ours),
        // a poller: faster, lower CPU, a long max
        run('sesamecare', 'poller A', { p99: 3, max: 2000, rate: 580, cpu: 0.6, switchRatio: 0.01, ...peers[0] }),
        run('semaphore', 'poller B', { p99: 200, max: 500, rate: 550, cpu: 0.9, switchRatio: 0.1, ...peers[1] }),
        // the diagnostic fair floor is not a peer: faster, less CPU, shorter max than any of them
        run('fair-raw', 'fair floor', { p99: 2, max: 3, rate: 5000, cpu: 0.01 }),
      ],
    };
    return goals(r).find((x) => x.id === 'P2')!;
  };

  test('is met when all five hold against the peers (not the fair floor)', () => {
    // 600 ≥ 580/s; every grant switched; p99 8 ≤ 10 ms; max 40 ≤ 500 / 10; CPU 0.5 ≤ 0.6 ms
    const g = p2({});
    expect(g.target).toBe(
      "handoffs/s ≥ the fastest peer's; 100 % holder switches; p99 wait ≤ 10 ms; " +
        "max wait ≤ 1/10 of the best peer's max; client CPU per grant ≤ the best peer's",
    );
    expect(g.met).toBe(true);
    expect(g.ratio).toBe(1.034);
    expect(g.measured).toMatch(/^handoffs\/s 600 vs the fastest peer \(poller A\) 580: 1\.034× — met; /);
    expect(g.measured).toContain('holder switches 100 % (rounded) — met');
    expect(g.measured).toContain('p99 wait 8 ms vs the 10 ms bound — met');
    expect(g.measured).toContain('max wait 40 ms vs the best peer max (poller B) 500 ms: 0.08×, bound 50 ms — met');
    expect(g.measured).toContain('client CPU per grant 0.5 ms vs the best peer (poller A) 0.6 ms: 0.833× — met');
    expect(g.measured).toContain('; all five met; ');
  });

  test.each([
    ['handoffs/s', { rate: 579 }],
    ['holder switches', { switchRatio: 0.99 }],
    ['p99', { p99: 10.5 }],
    ['max', { max: 51 }],
    ['CPU per grant', { cpu: 0.61 }],
  ] as const)('one condition missed (%s) is a miss, named', (name, row) => {
    const g = p2(row);
    expect(g.met).toBe(false);
    expect(g.measured).toContain(`; missed: ${name}; tails: `);
  });

  test('each bound is against the right peer: the fastest, the lowest max, the lowest CPU', () => {
    // poller B now the fastest (700/s) and the lowest CPU (0.4): both missed; the max bound is poller A's 300 ms / 10
    const g = p2({ max: 31 }, [{ max: 300 }, { rate: 700, cpu: 0.4 }]);
    expect(g.measured).toContain('handoffs/s 600 vs the fastest peer (poller B) 700');
    expect(g.measured).toContain('max wait 31 ms vs the best peer max (poller A) 300 ms: 0.103×, bound 30 ms — missed');
    expect(g.measured).toContain('client CPU per grant 0.5 ms vs the best peer (poller B) 0.4 ms');
    expect(g.measured).toContain('; missed: handoffs/s, max, CPU per grant; ');
  });

  test('100 % holder switches is judged on the exact count when the run has it', () => {
    // one unchanged pair in 1,999: the rounded ratio says 1
    const g = p2({ switchRatio: 1, switches: { count: 1998, of: 1999 } });
    expect(g.met).toBe(false);
    expect(g.measured).toContain('holder switches 1998 of 1999 — missed');
    expect(p2({ switches: { count: 1999, of: 1999 } }).met).toBe(true);
  });

  test("states each row's p99.9 and share of waits over 50 ms", () => {
    const g = p2({ p99: 30, max: 45, over50ms: 0 }, [
      { p99: 3, max: 2000, over50ms: 0.012 },
      { p99: 200, max: 500 },
    ]);
    expect(g.measured).toContain('poller A p99.9 1000 ms, 1.2 % over 50 ms');
    // no stored count: read off the quantiles, as an upper bound
    expect(g.measured).toContain('poller B p99.9 250 ms, ≤ 2 % over 50 ms');
    expect(g.measured).toContain('ours p99.9 22.5 ms, 0 % over 50 ms');
    expect(g.measured).not.toContain('fair floor');
  });
});
