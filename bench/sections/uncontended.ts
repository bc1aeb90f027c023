/** 1. Uncontended acquire+release on one Redis: sequential and 64 keys in parallel. */
import { redis } from '../lib/leasehold.js';
import { closeNodeRedis, ioredis, nodeRedis, purge, quit } from '../lib/clients.js';
import { interleaved, type LatencyResult } from '../lib/measure.js';
import type { Ctx } from '../lib/ctx.js';
import {
  driverSubject,
  floorSubject,
  nodeRedisFloorSubject,
  leaseholdSubject,
  semaphoreMutexSubject,
  sesamecareSubject,
  type Subject,
} from '../lib/subjects.js';

export const NAMES = {
  floor: 'raw ioredis (floor)',
  ours: 'leasehold (ioredis)',
  oursNodeRedis: 'leasehold (node-redis)',
  sesamecare: '@sesamecare-oss/redlock',
  semaphore: 'redis-semaphore Mutex',
  driver: 'leasehold redis() driver only (diagnostic)',
  nodeRedisFloor: 'raw node-redis (diagnostic floor)',
  /** P1's floor with 64 keys (ioredis batches a tick's writes, as leasehold's adapter does); a diagnostic sequentially */
  batchedFloor: 'raw ioredis, enableAutoPipelining (floor for 64 keys)',
  /** the peers on an ioredis client that batches a tick's writes (64 keys only) */
  sesamecareBatched: '@sesamecare-oss/redlock, enableAutoPipelining',
  semaphoreBatched: 'redis-semaphore Mutex, enableAutoPipelining',
} as const;

/** The batched floor's name in runs 12–16, where it was a diagnostic row only. */
export const LEGACY_BATCHED_FLOOR = 'raw ioredis, enableAutoPipelining (diagnostic floor)';

export interface UncontendedResult {
  port: number;
  sequential: LatencyResult[];
  parallel: LatencyResult[];
}

export async function uncontended(ctx: Ctx): Promise<UncontendedResult> {
  const port = 6379;
  const times = { ttlMs: 30_000, waitMs: 5_000 };
  const [a, b, d, e, f, admin] = await Promise.all([1, 2, 3, 4, 5, 6].map(() => ioredis(port)));
  // the floor and the peers with ioredis's own write batching: leasehold's adapter batches a tick's
  // scripts on any client, so with 64 keys they are compared on clients that batch too
  const [h, i, j] = await Promise.all([1, 2, 3].map(() => ioredis(port, { enableAutoPipelining: true })));
  const c = await nodeRedis(port);
  const g = await nodeRedis(port);
  const subjects: Subject[] = [
    await floorSubject(a!, times.ttlMs),
    leaseholdSubject(NAMES.ours, redis(b!), times),
    leaseholdSubject(NAMES.oursNodeRedis, redis(c), times),
    sesamecareSubject(NAMES.sesamecare, [d!], times, false),
    semaphoreMutexSubject(NAMES.semaphore, e!, times),
    driverSubject(NAMES.driver, redis(f!), times.ttlMs),
    await nodeRedisFloorSubject(g, times.ttlMs),
    await floorSubject(h!, times.ttlMs, NAMES.batchedFloor),
  ];
  // with 64 keys: the batched floor first (the table's reference), the plain rows kept, labelled
  const batchedPeers: Subject[] = [
    sesamecareSubject(NAMES.sesamecareBatched, [i!], times, false),
    semaphoreMutexSubject(NAMES.semaphoreBatched, j!, times),
  ];
  const parallelSubjects = [subjects[subjects.length - 1]!, ...subjects.slice(0, -1), ...batchedPeers];
  const slug = (s: Subject) => s.name.replace(/[^a-z0-9]+/gi, '-');
  const keys = (s: Subject, n: number) =>
    Array.from({ length: n }, (_, i) => `bench:${ctx.runId}:u:${slug(s)}:${n}:${i}`);
  // many short interleaved rounds: this machine's loopback latency shifts between modes every
  // few hundred ms (shared cores), so every subject must see the same mix; goals use the
  // per-round paired ratios
  const rounds = ctx.quick ? 2 : 10;
  const per = ctx.quick ? 120 : 250;
  try {
    ctx.log(`sequential: ${subjects.length} subjects × ${rounds} rounds × ${per}ms`);
    const sequential = await interleaved(
      subjects,
      rounds,
      (s) => ({ keys: keys(s, 1), durationMs: per, maxOps: 1_000_000 }),
      ctx.quick ? 100 : 300,
      () => {},
    );
    ctx.log(`parallel (64 keys): ${parallelSubjects.length} subjects × ${rounds} rounds × ${per}ms`);
    const parallel = await interleaved(
      parallelSubjects,
      rounds,
      (s) => ({ keys: keys(s, 64), durationMs: per, maxOps: 10_000_000 }),
      ctx.quick ? 100 : 300,
      () => {},
    );
    return { port, sequential, parallel };
  } finally {
    await Promise.allSettled([...subjects, ...batchedPeers].map((s) => s.close()));
    await purge(admin!, `bench:${ctx.runId}:`).catch(() => 0);
    await Promise.allSettled([a, b, d, e, f, h, i, j, admin].map((x) => quit(x!)));
    await closeNodeRedis(c);
    await closeNodeRedis(g);
  }
}
