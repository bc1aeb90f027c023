/** What a scale child (bench/scale-child.ts) is asked to do and reports. */
export interface ScaleSpec {
  /** leasehold-session: `redis(client, { session: true })` (one session key renewed per tick) */
  lib: 'leasehold' | 'leasehold-session' | 'redis-semaphore' | 'leasehold-cluster';
  n: number;
  windowMs: number;
  ttlMs: number;
  port: number;
  /**
   * The session comparison (bench/sections/scale-session.ts): the child acquires, then measures
   * one window of `windowMs` each time the parent asks, `rounds` times in all, then releases. The
   * row's figures are the medians of its rounds.
   */
  rounds?: number;
  /**
   * The control of a leasehold row: the same leases held in the same way (same objects in the
   * heap, the keeper's and the sessions' entries included, same keys in Redis) with a TTL so far
   * beyond the window (all its rounds' windows) that their first renewal falls after it, so that
   * nothing is sent during it.
   * Its CPU is what holding `n` leases costs a process and a Redis server at rest; the row's CPU
   * minus its control's is what renewing them costs.
   */
  control?: boolean;
}

export interface ScaleResult {
  lib: ScaleSpec['lib'];
  n: number;
  /** the control row (held without renewal): see ScaleSpec.control */
  control?: boolean;
  ttlMs: number;
  /** the library's renewal period for these leases, ms */
  renewEveryMs: number;
  acquireAllMs: number;
  /** the window's length (rounds: the median window's) */
  windowMs: number;
  /** top-level commands Redis processed per second during the window (INFO stats) */
  redisCommandsPerSec: number;
  /** Redis server CPU (user+sys) during the window, % of one core */
  redisCpuPct: number;
  /** client → Redis renewal requests per second that were separate round trips (pipelines count once) */
  roundTripsPerSec: number;
  /** renewal round trips per renewal period (leasehold goal: ≤ 1) */
  roundTripsPerTick: number;
  /** lease renewals per second (items renewed) */
  renewalsPerSec: number;
  /** client CPU (user + system, all threads, GC included), % of one core (rounds: the median) */
  clientCpuPct: number;
  /** client user and system CPU, % of one core (not in runs before 2026-12-05) */
  userCpuPct?: number;
  sysCpuPct?: number;
  heapBeforeMB: number;
  heapHeldMB: number;
  heapPeakMB: number;
  rssMB: number;
  lost: number;
  releaseAllMs: number;
  /** Redis Cluster row: masters the leases spread over; round trips per tick are then per node */
  nodes?: number;
  error?: string;
  /** ScaleSpec.rounds: every round's window, in round order (the figures above are their medians) */
  rounds?: ScaleWindow[];
}

/** One measured window of a child that holds its leases through several (ScaleSpec.rounds). */
export interface ScaleWindow {
  windowMs: number;
  redisCommandsPerSec: number;
  /** Redis CPU, % of one core: user + system, and each */
  redisCpuPct: number;
  redisUserPct: number;
  redisSysPct: number;
  roundTripsPerSec: number;
  roundTripsPerTick: number;
  renewalsPerSec: number;
  /** client CPU, % of one core: user + system, and each */
  clientCpuPct: number;
  userCpuPct: number;
  sysCpuPct: number;
  heapPeakMB: number;
  /** leases not held at the window's end */
  lost: number;
}
