/** Acquire+release latency loops over a Subject: sequential (one lane) or N lanes on N keys. */
import { currentScope, throwIfStopped } from './scope.js';
import { errText, now, percentile, round, roundSummary, Samples, summarize, within, type Summary } from './stats.js';
import type { Subject } from './subjects.js';

export interface LatencyRaw {
  acquire: Samples;
  release: Samples;
  total: Samples;
  /** how long each failed operation took, from its acquire's start to the failure */
  failed: Samples;
  elapsedMs: number;
  errors: number;
  lastError?: string;
  /** per interleaved round: p50 of acquire+release, p50 of acquire, ops/s */
  rounds: RoundStats;
}

export interface RoundStats {
  p50: number[];
  acquireP50: number[];
  opsPerSec: number[];
}

export interface LatencyResult {
  name: string;
  lanes: number;
  ops: number;
  opsPerSec: number;
  elapsedMs: number;
  /** acquire + release, per operation, in ms */
  total: Summary;
  acquire: Summary;
  release: Summary;
  errors: number;
  /** how long the failed operations took (start of acquire to the failure), when there were any:
   * they are in no other figure, so a subject that fails fast cannot pass for a fast one unseen */
  failed?: Summary;
  lastError?: string;
  /** the same, per interleaved round: paired ratios between subjects use these */
  rounds: RoundStats;
}

export function emptyRaw(): LatencyRaw {
  return {
    acquire: new Samples(),
    release: new Samples(),
    total: new Samples(),
    failed: new Samples(),
    elapsedMs: 0,
    errors: 0,
    rounds: { p50: [], acquireP50: [], opsPerSec: [] },
  };
}

export interface LoopOptions {
  keys: string[];
  durationMs: number;
  maxOps: number;
  /** Bound on one acquire or release (ms); unbounded when omitted (cheaper: no timer per op). */
  opTimeoutMs?: number;
  /** Stop a lane after this many errors. */
  maxErrors?: number;
}

/** Runs one lane per key until the time or op budget is spent; appends samples to `into`. */
export async function latencyLoop(subject: Subject, o: LoopOptions, into: LatencyRaw): Promise<void> {
  const start = now();
  const end = start + o.durationMs;
  const perLane = Math.max(1, Math.floor(o.maxOps / o.keys.length));
  const maxErrors = o.maxErrors ?? 50;
  const bound = <T>(p: Promise<T>, what: string) =>
    o.opTimeoutMs === undefined ? p : within(p, o.opTimeoutMs, `${subject.name} ${what}`);
  // a section stopped past its budget (scope.ts): its lanes end at their next operation
  const stop = currentScope()?.signal;
  const lane = async (key: string) => {
    let errors = 0;
    for (let i = 0; i < perLane && now() < end && errors < maxErrors && !stop?.aborted; i++) {
      const t0 = now();
      try {
        const held = await bound(subject.acquire(key), 'acquire');
        const t1 = now();
        await bound(held.release(), 'release');
        const t2 = now();
        into.acquire.push(t1 - t0);
        into.release.push(t2 - t1);
        into.total.push(t2 - t0);
      } catch (e) {
        into.failed.push(now() - t0);
        errors++;
        into.errors++;
        into.lastError = errText(e);
      }
    }
  };
  await Promise.all(o.keys.map(lane));
  into.elapsedMs += now() - start;
}

export function finish(name: string, lanes: number, raw: LatencyRaw): LatencyResult {
  const ops = raw.total.length;
  const r: LatencyResult = {
    name,
    lanes,
    ops,
    opsPerSec: Math.round(ops / (raw.elapsedMs / 1000)),
    elapsedMs: Math.round(raw.elapsedMs),
    total: roundSummary(summarize(raw.total.values())),
    acquire: roundSummary(summarize(raw.acquire.values())),
    release: roundSummary(summarize(raw.release.values())),
    errors: raw.errors,
    rounds: {
      p50: raw.rounds.p50.map(round),
      acquireP50: raw.rounds.acquireP50.map(round),
      opsPerSec: raw.rounds.opsPerSec.map(Math.round),
    },
  };
  if (raw.failed.length) r.failed = roundSummary(summarize(raw.failed.values()));
  if (raw.lastError) r.lastError = raw.lastError;
  return r;
}

/**
 * Runs every subject for `rounds` rounds, rotating the order each round so that drift in the
 * machine's load spreads evenly; one short warm-up per subject first (not recorded).
 */
export async function interleaved(
  subjects: Subject[],
  rounds: number,
  mkOptions: (s: Subject, round: number) => LoopOptions,
  warmupMs: number,
  log: (s: string) => void,
): Promise<LatencyResult[]> {
  const raws = new Map<Subject, LatencyRaw>(subjects.map((s) => [s, emptyRaw()]));
  for (const s of subjects) {
    const o = mkOptions(s, -1);
    await latencyLoop(s, { ...o, durationMs: warmupMs, maxOps: 2000 * o.keys.length }, emptyRaw());
    throwIfStopped();
  }
  for (let r = 0; r < rounds; r++) {
    const order = subjects.map((_, i) => subjects[(i + r) % subjects.length]!);
    for (const s of order) {
      const raw = raws.get(s)!;
      const from = raw.total.length;
      const t = now();
      await latencyLoop(s, mkOptions(s, r), raw);
      throwIfStopped();
      const slice = (x: Samples) => Float64Array.from(x.values().subarray(from)).sort();
      raw.rounds.p50.push(percentile(slice(raw.total), 50));
      raw.rounds.acquireP50.push(percentile(slice(raw.acquire), 50));
      raw.rounds.opsPerSec.push((raw.total.length - from) / ((now() - t) / 1000));
    }
    log(`round ${r + 1}/${rounds} done`);
  }
  return subjects.map((s) => finish(s.name, mkOptions(s, 0).keys.length, raws.get(s)!));
}

/** Median over rounds of a[r] / b[r]: a ratio between two subjects measured in the same rounds. */
export function pairedRatio(a: number[], b: number[]): number {
  const rs = a.map((v, i) => v / b[i]!).filter((v) => Number.isFinite(v));
  return rs.length ? percentile(Float64Array.from(rs).sort(), 50) : NaN;
}

/**
 * A backend section's sequential rows (floor, leasehold, driver only): one key per subject,
 * `rounds` interleaved rounds of `perMs` each (fewer and shorter with `quick`).
 */
export function sequentialRows(
  subjects: Subject[],
  o: { runId: string; tag: string; quick: boolean; perMs: number; log: (s: string) => void },
): Promise<LatencyResult[]> {
  const rounds = o.quick ? 2 : 10;
  const per = o.quick ? Math.min(o.perMs, 150) : o.perMs;
  o.log(`sequential: ${subjects.map((s) => s.name).join(', ')} × ${rounds} rounds × ${per}ms`);
  return interleaved(
    subjects,
    rounds,
    (s) => ({
      keys: [`bench:${o.runId}:${o.tag}:${s.name.replace(/\W+/g, '-')}`],
      durationMs: per,
      maxOps: 1_000_000,
      opTimeoutMs: 10_000,
    }),
    o.quick ? 100 : 300,
    () => {},
  );
}
