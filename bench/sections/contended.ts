/**
 * 2. (and 5b) Contended handoff: 8 worker processes, one key, 1 ms critical section, a fixed
 * number of grants in total (an equal share per worker). Waits are timed on the workers.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ioredis, purge, quit } from '../lib/clients.js';
import { prepareSqliteFile } from '../lib/subjects.js';
import type { Ctx } from '../lib/ctx.js';
import { forkTs, stopChild } from '../lib/procs.js';
import { percentile, round, roundSummary, summarize, type Summary } from '../lib/stats.js';
import type { FromWorker, ToWorker, WorkerLib, WorkerResult, WorkerSpec } from '../worker.js';

const WORKER = fileURLToPath(new URL('../worker.ts', import.meta.url));
const PROFILE = process.env.LEASEHOLD_BENCH_PROFILE;

export interface ContendedRun {
  lib: WorkerLib;
  name: string;
  /** what the library was configured with (retry, ttl) */
  config: string;
  workers: number;
  grants: number;
  elapsedMs: number;
  handoffsPerSec: number;
  /** wait per acquire, ms */
  wait: Summary;
  /** fraction of grants that went to a different worker than the previous grant */
  switchRatio: number;
  /**
   * the same, unrounded: `count` of the `of` consecutive grant pairs changed holder (switchRatio,
   * rounded to 0.1 %, shows 1 with one pair in 2,000 unchanged). Absent before 2026-12-05.
   */
  switches?: { count: number; of: number };
  /**
   * ms from one holder's release call to the next grant (whoever gets it), p50 and p99: with the
   * critical section (`meanHoldMs`) it makes the time per grant, so handoffs/s ≈ 1000 / (hold +
   * handoff). Absent in results from before 2026-12-03.
   */
  handoff?: { p50: number; p99: number };
  /** grants per worker, to see starvation */
  perWorker: number[];
  meanHoldMs: number;
  /** CPU time of all worker processes together, per grant (ms) */
  cpuMsPerGrant: number;
  /** commands the workers sent to Redis per grant (acquire attempts + release + …); null for Postgres */
  commandsPerGrant: number | null;
  /**
   * wake-ups (voluntary context switches) of all worker processes together, per grant; null off
   * Linux. Absent before 2026-12-05.
   */
  wakeupsPerGrant?: number | null;
  errors: number;
  incomplete: boolean;
  lastError?: string;
  /** [quantile, wait ms] at 0, 0.005, …, 0.99, 0.992, …, 0.999 and 1 (max): the distribution the chart draws */
  cdf: [number, number][];
  /** share of waits longer than 50 ms (0..1); absent before 2026-12-05 (bench/report/tail.ts estimates it from cdf) */
  over50ms?: number;
}

export interface ContendedPlan {
  lib: WorkerLib;
  name: string;
  config: string;
}

function nextMessage(w: ChildProcess, type: FromWorker['type'], ms: number): Promise<FromWorker> {
  return new Promise((resolve, reject) => {
    const onMsg = (m: FromWorker) => {
      if (m.type === type || m.type === 'failed') {
        done();
        if (m.type === 'failed') reject(new Error(m.error));
        else resolve(m);
      }
    };
    const onExit = (code: number | null) => {
      done();
      reject(new Error(`worker exited (${code})`));
    };
    const t = setTimeout(() => {
      done();
      reject(new Error(`worker sent no '${type}' within ${ms}ms`));
    }, ms);
    const done = () => {
      clearTimeout(t);
      w.off('message', onMsg);
      w.off('exit', onExit);
    };
    w.on('message', onMsg);
    w.once('exit', onExit);
  });
}

// with a callback: a send to a worker that is gone (killed with a stopped section) is not an
// 'error' event, which, unhandled, would end the bench; nextMessage reports the worker's exit
const tell = (w: ChildProcess, m: ToWorker) => w.send(m, () => {});

class Pool {
  private constructor(readonly workers: ChildProcess[]) {}

  /** With LEASEHOLD_BENCH_PROFILE=<dir>, each worker profiles its rounds into <dir>/<lib>/ (worker.ts). */
  static start(n: number): Pool {
    return new Pool(Array.from({ length: n }, () => forkTs(WORKER, [], [])));
  }

  /** Every worker still runs and listens (a section stopped past its budget kills its workers). */
  alive(): boolean {
    return this.workers.every((w) => w.connected && w.exitCode === null && w.signalCode === null);
  }

  /** `keep`: the workers keep their subjects for the next round (the warm-up round's). */
  async run(specOf: (i: number) => WorkerSpec, setupMs: number, runMs: number, keep = false): Promise<WorkerResult[]> {
    const ws = this.workers;
    await Promise.all(
      ws.map((w, i) => {
        const p = nextMessage(w, 'ready', setupMs);
        tell(w, { type: 'setup', spec: specOf(i) });
        return p;
      }),
    );
    const done = ws.map((w) => nextMessage(w, 'done', runMs));
    for (const w of ws) tell(w, { type: 'go' });
    const results = (await Promise.all(done)).map((m) => (m as Extract<FromWorker, { type: 'done' }>).result);
    if (keep) return results;
    await Promise.all(
      ws.map((w) => {
        const p = nextMessage(w, 'closed', 5000);
        tell(w, { type: 'teardown' });
        return p;
      }),
    );
    return results;
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => stopChild(w)));
  }
}

function aggregate(plan: ContendedPlan, results: WorkerResult[]): ContendedRun {
  const waits = results.flatMap((r) => r.waits);
  const grants = results
    .flatMap((r) => r.grantsAt.map((t, j) => [t, r.index, r.releasedAt[j] ?? NaN] as const))
    .sort((a, b) => a[0] - b[0]);
  let switches = 0;
  const handoffs: number[] = [];
  for (let i = 1; i < grants.length; i++) {
    if (grants[i]![1] !== grants[i - 1]![1]) switches++;
    // a grant that came before the last holder let go is not a handoff (a run's first grants, a
    // lock whose TTL ran out)
    const gap = grants[i]![0] - grants[i - 1]![2];
    if (gap >= 0) handoffs.push(gap);
  }
  const byGap = Float64Array.from(handoffs).sort();
  const start = Math.min(...results.map((r) => r.startAt));
  const end = Math.max(...results.map((r) => r.endAt));
  const sorted = Float64Array.from(waits).sort();
  const qs = [...Array.from({ length: 199 }, (_, i) => i / 200), 0.99, 0.992, 0.994, 0.996, 0.998, 0.999, 1];
  const cdf = qs.map((q): [number, number] => [q, round(q === 0 ? (sorted[0] ?? NaN) : percentile(sorted, q * 100))]);
  const errored = results.find((r) => r.lastError);
  const run: ContendedRun = {
    lib: plan.lib,
    name: plan.name,
    config: plan.config,
    workers: results.length,
    grants: waits.length,
    elapsedMs: Math.round(end - start),
    handoffsPerSec: Math.round(waits.length / ((end - start) / 1000)),
    wait: roundSummary(summarize(waits)),
    switchRatio: round(grants.length > 1 ? switches / (grants.length - 1) : 0),
    switches: { count: switches, of: Math.max(0, grants.length - 1) },
    handoff: { p50: round(percentile(byGap, 50)), p99: round(percentile(byGap, 99)) },
    perWorker: results.map((r) => r.waits.length),
    meanHoldMs: round(results.reduce((s, r) => s + r.meanHoldMs * r.waits.length, 0) / Math.max(1, waits.length)),
    cpuMsPerGrant: round(results.reduce((s, r) => s + r.cpuMs, 0) / Math.max(1, waits.length)),
    commandsPerGrant: results.some((r) => r.commands === null)
      ? null
      : round(results.reduce((s, r) => s + r.commands!, 0) / Math.max(1, waits.length)),
    wakeupsPerGrant: results.some((r) => r.wakeups === null)
      ? null
      : round(results.reduce((s, r) => s + r.wakeups!, 0) / Math.max(1, waits.length)),
    errors: results.reduce((s, r) => s + r.errors, 0),
    incomplete: results.some((r) => r.incomplete),
    cdf,
    over50ms: round(waits.length ? waits.filter((w) => w > 50).length / waits.length : 0),
  };
  if (errored?.lastError) run.lastError = errored.lastError;
  return run;
}

export interface ContendedOptions {
  workers: number;
  grants: number;
  csMs: number;
  deadlineMs: number;
  /** Grants of a discarded contended round on the same processes before the measured one (JIT warm-up). */
  warmGrants: number;
  /** Redis port for the Redis libraries (default 6379) */
  redisPort?: number;
}

export function contendedOptions(ctx: Pick<Ctx, 'quick'>): ContendedOptions {
  return ctx.quick
    ? { workers: 8, grants: 160, csMs: 1, deadlineMs: 8_000, warmGrants: 0 }
    : { workers: 8, grants: 2_000, csMs: 1, deadlineMs: 45_000, warmGrants: 2_000 };
}

/**
 * A --quick run's one pool, shared by every section's contended rows (the etcd section's too):
 * eight workers start in ~10 s on a busy 2-core machine, and a smoke run needs them once.
 * Closed by `closeQuickPool()` at the end of the run.
 */
let quickPool: Pool | null = null;
const sharePool = (ctx: Ctx) => ctx.quick && !PROFILE;

/** Ends a --quick run's shared pool (bench/run.ts, at the end). */
export async function closeQuickPool(): Promise<void> {
  const p = quickPool;
  quickPool = null;
  await p?.close();
}

/** Runs each plan on its own pool of fresh worker processes (one shared pool in a --quick run). */
export async function contended(
  ctx: Ctx,
  plans: ContendedPlan[],
  o = contendedOptions(ctx),
): Promise<{ options: ContendedOptions; runs: ContendedRun[]; failures: { name: string; error: string }[] }> {
  const runs: ContendedRun[] = [];
  const failures: { name: string; error: string }[] = [];
  let pool: Pool | null = sharePool(ctx) && quickPool?.alive() ? quickPool : null;
  const admin = await ioredis(o.redisPort ?? 6379);
  try {
    for (const plan of plans) {
      ctx.signal.throwIfAborted(); // past the section's budget: no next library
      pool ??= Pool.start(o.workers);
      if (sharePool(ctx)) quickPool = pool;
      const key = `bench:${ctx.runId}:contended:${plan.lib}`;
      const per = Math.ceil(o.grants / o.workers);
      const dir = plan.lib.includes('sqlite') ? mkdtempSync(join(tmpdir(), 'leasehold-bench-')) : null;
      // switching a new file to WAL takes an exclusive lock that busy_timeout does not cover: done
      // once here, before eight processes open it at the same moment (WAL mode is kept in the file)
      if (dir && plan.lib === 'sqlite-raw') prepareSqliteFile(join(dir, 'locks.db'));
      ctx.log(`${plan.name}: ${o.workers} processes × ${per} grants, cs ${o.csMs}ms`);
      try {
        const spec = (k: string, count: number) => (index: number) => ({
          lib: plan.lib,
          index,
          key: k,
          count,
          workers: o.workers,
          csMs: o.csMs,
          deadlineMs: o.deadlineMs,
          ttlMs: 5_000,
          waitMs: o.deadlineMs,
          redisPort: o.redisPort ?? 6379,
          ...(dir ? { sqlitePath: join(dir, 'locks.db') } : {}),
        });
        // a setup can take tens of seconds: a worker loads tsx and its clients on a busy 2-core machine
        const setupMs = 60_000;
        if (o.warmGrants > 0) {
          // the same contention on another key first, results dropped: the rows measure the code
          // its users run (JIT-compiled after hours of waits), not the first few hundred calls of
          // the wait path in the interpreter; every library gets the same warm-up
          const warm = Math.ceil(o.warmGrants / o.workers);
          // on the same subjects as the measured round: their connections (a Postgres waiter
          // connection, a subscriber) open and warm, as in a service that has run for a while
          await pool.run(spec(`${key}:warm`, warm), setupMs, o.deadlineMs + 15_000, true);
        }
        const results = await pool.run(spec(key, per), setupMs, o.deadlineMs + 15_000);
        const run = aggregate(plan, results);
        runs.push(run);
        ctx.log(
          `  ${run.handoffsPerSec}/s, wait p50 ${run.wait.p50} p99 ${run.wait.p99} max ${run.wait.max} ms, ` +
            `${run.commandsPerGrant ?? '–'} commands, ${run.wakeupsPerGrant ?? '–'} wake-ups and ` +
            `${run.cpuMsPerGrant} ms CPU per grant` +
            (run.incomplete ? ' (INCOMPLETE: deadline)' : ''),
        );
      } catch (e) {
        failures.push({ name: plan.name, error: e instanceof Error ? e.message : String(e) });
        ctx.log(`  failed: ${failures.at(-1)!.error}`);
        await pool.close();
        pool = null;
        if (sharePool(ctx)) quickPool = null;
      } finally {
        if (dir) rmSync(dir, { recursive: true, force: true });
        // a fresh pool per library: a worker that ran one library has warmed (JIT) the code the
        // next one shares with it — ioredis, net, streams, timers — and the contended rows run
        // mostly unoptimised code, so a shared pool favoured every library after the first (and
        // users run one lock library per process). A --quick run (a smoke test of the harness,
        // ~10 s per pool start) shares one pool, unless profiled: a profile of one library must
        // not start on code another one warmed.
        if (pool && (!ctx.quick || PROFILE)) {
          await pool.close();
          pool = null;
        }
      }
    }
  } finally {
    if (!sharePool(ctx)) await pool?.close();
    await purge(admin, `bench:${ctx.runId}:`).catch(() => 0);
    await quit(admin);
  }
  return { options: o, runs, failures };
}
