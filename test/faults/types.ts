/**
 * Shared vocabulary of the fault-injection suite: the worker's configuration, the history events
 * it reports, and the messages between the harness (parent) and its workers (child processes).
 *
 * Time: every event carries `t`, read from `process.hrtime.bigint()` in the process where the
 * thing happened. On Linux that is CLOCK_MONOTONIC, one clock for every process of the machine,
 * so the parent needs no conversion; it only subtracts the run's start. The harness verifies this
 * at each worker's start (the worker's clock reading must fall between the parent's send and
 * receive times of a ping), and refuses to run otherwise.
 */

export type BackendName = 'redis' | 'redlock' | 'postgres' | 'sqlite' | 'sentinel' | 'cluster' | 'zookeeper' | 'etcd';
export const BACKENDS: readonly BackendName[] = [
  'redis',
  'redlock',
  'postgres',
  'sqlite',
  'sentinel',
  'cluster',
  'zookeeper',
  'etcd',
];

/** Where the fenced resource lives: a key on the shared, never-faulted Redis, or a Postgres row. */
export type ResourceSpec = { kind: 'redis'; port: number; name: string } | { kind: 'postgres'; name: string };

/** How a worker reaches the lock servers (through the harness's proxies). */
export interface LockEndpoints {
  /** Ports of the lock servers as the worker must dial them (proxies, 127.0.0.1). */
  ports: number[];
  /** Postgres: the database URL parts (the port is replaced by ports[0]). */
  pg?: { user: string; database: string };
  /** SQLite: the database file (no server, no proxy: process faults only). */
  sqlite?: string;
}

export type Broken = 'release-no-token';

export interface WorkerConfig {
  backend: BackendName;
  endpoints: LockEndpoints;
  resource: ResourceSpec;
  /** Lock key (without prefix) and the Locks prefix. */
  key: string;
  prefix: string;
  ttlMs: number;
  waitMs: number;
  /** The deliberate gap between the read and the write of the resource, uniform in [min, max]. */
  gapMs: readonly [number, number];
  /** With probability `longGapP` the gap is drawn from `longGapMs` instead: holds that need renewals. */
  longGapMs: readonly [number, number];
  longGapP: number;
  /** Pause between a release and the next acquire, uniform in [min, max]. */
  thinkMs: readonly [number, number];
  /** Client command timeout towards the lock servers. */
  opTimeoutMs: number;
  seed: number;
  /** A deliberately broken build, for the test that the checker catches it. */
  broken?: Broken;
}

export type EvType = 'invoke' | 'ok' | 'fail' | 'info';

/**
 * One history event. `p` is the logical process (a worker run; a killed worker's replacement gets
 * a new number, as in Jepsen); p = -1 is the nemesis. `f` is the operation:
 *   acquire  invoke | ok {fence, deadline} | fail {error}
 *   read     invoke {fence} | ok {fence, value} | fail {fence, stale, highest} | info {error}
 *   write    invoke {fence, value, from} | ok {fence} | fail {fence, stale, highest} | info {error}
 *   release  invoke {fence} | ok {fence, released} | fail {fence, error}
 *   renew    info {fence, ok, deadline?, error?}      (from the leasehold:extend channel)
 *   lost     info {fence, reason}                     (lease.signal aborted with LeaseLostError)
 *   crash    info                                     (the harness SIGKILLed the process)
 *   nemesis events (p = -1): info, f = the fault, value = details
 */
export interface Ev {
  /** Milliseconds on the shared monotonic clock (relative to the run's start once recorded). */
  t: number;
  p: number;
  type: EvType;
  f: string;
  fence?: string;
  value?: Record<string, unknown>;
}

/** One entry of the resource's own log, in the order the resource applied them. */
export interface ResourceEntry {
  seq: number;
  op: 'read' | 'write';
  fence: string;
  accepted: boolean;
  /** Highest fence the resource had seen before this op. */
  highest: string;
  /** read: the value returned; write: the value written. */
  value: number;
  /** write: the value the writer had read. */
  from?: number;
  /** Operation id `<p>.<n>` (ties the entry to the history). */
  id: string;
}

export type ToWorker = { kind: 'run'; p: number; config: WorkerConfig } | { kind: 'halt' } | { kind: 'ping' };

export type FromWorker =
  | { kind: 'ready' }
  | { kind: 'pong'; t: number }
  | { kind: 'ev'; ev: Ev }
  | { kind: 'halted'; p: number }
  | { kind: 'fatal'; p: number; error: string };

/** The shared monotonic clock, in milliseconds. */
export const clock = (): number => Number(process.hrtime.bigint()) / 1e6;

/** A small seeded PRNG (mulberry32): the schedule's choices repeat for a seed; interleavings do not. */
export function rng(seed: number): {
  next(): number;
  int(lo: number, hi: number): number;
  pick<T>(xs: readonly T[]): T;
} {
  let a = seed >>> 0 || 0x9e3779b9;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (xs) => xs[Math.floor(next() * xs.length)]!,
  };
}

export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener('abort', done, { once: true });
  });
