/**
 * 3. Redlock over 3 and 5 independent nodes (7001..7005) vs a single node, and 5 nodes of which
 * one (our own redis-server on a free port) is stalled with SIGSTOP. Acquire and release are timed
 * separately; sequential, one key per subject.
 */
import type { Redis } from 'ioredis';
import { redis } from '../lib/leasehold.js';
import { ioredis, probe, purge, quit, type Optional, type RedlockFactory, loadRedlock } from '../lib/clients.js';
import { freePort } from '../../test/support/ports.js';
import type { Ctx } from '../lib/ctx.js';
import { interleaved, type LatencyResult } from '../lib/measure.js';
import { onCleanup, RedisServer } from '../lib/procs.js';
import { errText } from '../lib/stats.js';
import {
  driverSubject,
  leaseholdSubject,
  semaphoreMutexSubject,
  semaphoreRedlockSubject,
  sesamecareSubject,
  type Subject,
} from '../lib/subjects.js';

export const SHARED = [7001, 7002, 7003, 7004, 7005];
/** ioredis per-command timeout in the stall scenario, for every library (see docs/benchmarks.md). */
export const STALL_COMMAND_TIMEOUT_MS = 1000;

export interface RedlockGroup {
  /** 'single' (7001) | '3 nodes' | '5 nodes' | '5 nodes, healthy' | '5 nodes, 1 stalled' */
  setup: string;
  ports: number[];
  results: LatencyResult[];
}

export interface RedlockResult {
  ours: { ready: boolean; reason?: string };
  groups: RedlockGroup[];
  stall?: { port: number; commandTimeoutMs: number; error?: string };
}

export const LIBS = {
  ours: 'leasehold',
  sesamecare: '@sesamecare-oss/redlock',
  semaphore: 'redis-semaphore',
} as const;

const times = { ttlMs: 30_000, waitMs: 5_000 };

/** Subjects over `clients` (one set per library so they never share a connection). */
function subjects(
  ours: Optional<RedlockFactory>,
  per: Record<string, Redis[]>,
  single: boolean,
  diag: boolean,
): Subject[] {
  const out: Subject[] = [];
  if (single) {
    out.push(leaseholdSubject(`${LIBS.ours} redis()`, redis(per.ours![0]!), times));
    if (diag)
      out.push(driverSubject(`${LIBS.ours} redis() driver only (diagnostic)`, redis(per.diag![0]!), times.ttlMs));
    out.push(sesamecareSubject(`${LIBS.sesamecare}`, per.sesamecare!, times, false));
    out.push(semaphoreMutexSubject(`${LIBS.semaphore} Mutex`, per.semaphore![0]!, times));
  } else {
    if (ours.ready) {
      out.push(leaseholdSubject(`${LIBS.ours} redlock()`, ours.factory(per.ours!), times));
      if (diag) {
        out.push(
          driverSubject(`${LIBS.ours} redlock() driver only (diagnostic)`, ours.factory(per.diag!), times.ttlMs),
        );
      }
    }
    out.push(sesamecareSubject(`${LIBS.sesamecare}`, per.sesamecare!, times, false));
    out.push(semaphoreRedlockSubject(`${LIBS.semaphore} RedlockMutex`, per.semaphore!, times));
  }
  return out;
}

async function clientsFor(ports: number[], opts = {}): Promise<Record<string, Redis[]>> {
  const per: Record<string, Redis[]> = {};
  for (const lib of ['ours', 'diag', 'sesamecare', 'semaphore'])
    per[lib] = await Promise.all(ports.map((p) => ioredis(p, opts)));
  return per;
}

async function closeAll(subs: Subject[], per: Record<string, Redis[]>): Promise<void> {
  await Promise.allSettled(subs.map((s) => s.close()));
  await Promise.allSettled(Object.values(per).flatMap((cs) => cs.map((c) => quit(c))));
}

export async function redlockSection(ctx: Ctx): Promise<RedlockResult> {
  const rounds = ctx.quick ? 2 : 8;
  const per = ctx.quick ? 80 : 250;
  const ours = await probe(await loadRedlock(), async (f) => {
    const cs = await Promise.all(SHARED.slice(0, 3).map((p) => ioredis(p)));
    const s = leaseholdSubject('probe', f(cs), times);
    try {
      await (await s.acquire(`bench:${ctx.runId}:probe`)).release();
    } finally {
      await s.close();
      await Promise.all(cs.map((c) => quit(c)));
    }
  });
  if (!ours.ready) ctx.log(`leasehold redlock() not measured: ${ours.reason}`);
  const result: RedlockResult = {
    ours: ours.ready ? { ready: true } : { ready: false, reason: ours.reason },
    groups: [],
  };
  const key = (s: Subject, setup: string) =>
    `bench:${ctx.runId}:rl:${setup.replace(/\W+/g, '-')}:${s.name.replace(/\W+/g, '-')}`;

  const admins = await Promise.all(SHARED.map((p) => ioredis(p)));
  const setups = [
    ['single node', SHARED.slice(0, 1)],
    ['3 nodes', SHARED.slice(0, 3)],
    ['5 nodes', SHARED],
  ] as const;
  const all: { setup: string; ports: number[]; clients: Record<string, Redis[]>; subs: Subject[] }[] = [];
  try {
    for (const [setup, ports] of setups) {
      const clients = await clientsFor([...ports]);
      all.push({
        setup,
        ports: [...ports],
        clients,
        subs: subjects(ours, clients, ports.length === 1, setup !== '3 nodes'),
      });
    }
    // every setup in the same interleaved rounds, so the 5-node / single-node ratio is paired
    const flat = all.flatMap((g) => g.subs.map((s) => ({ g, s })));
    const setupOf = new Map(flat.map(({ g, s }) => [s, g.setup]));
    ctx.log(`${flat.length} subjects (single node, 3 and 5 nodes) × ${rounds} rounds × ${per}ms`);
    const results = await interleaved(
      flat.map((x) => x.s),
      rounds,
      (s) => ({ keys: [key(s, setupOf.get(s)!)], durationMs: per, maxOps: 100_000, opTimeoutMs: 5000, maxErrors: 20 }),
      ctx.quick ? 50 : 200,
      () => {},
    );
    for (const g of all) {
      result.groups.push({
        setup: g.setup,
        ports: g.ports,
        results: results.filter((_, i) => flat[i]!.g === g),
      });
    }
    const stallPort = await freePort();
    result.stall = { port: stallPort, commandTimeoutMs: STALL_COMMAND_TIMEOUT_MS };
    try {
      await stallScenario(ctx, ours, result, key, stallPort);
    } catch (e) {
      result.stall.error = errText(e);
      ctx.log(`stall scenario failed: ${result.stall.error}`);
    }
  } finally {
    for (const g of all) await closeAll(g.subs, g.clients);
    await Promise.allSettled(admins.map((a) => purge(a, `bench:${ctx.runId}:`)));
    await Promise.allSettled(admins.map((a) => quit(a)));
  }
  return result;
}

async function stallScenario(
  ctx: Ctx,
  ours: Optional<RedlockFactory>,
  result: RedlockResult,
  key: (s: Subject, setup: string) => string,
  stallPort: number,
): Promise<void> {
  const server = new RedisServer(stallPort);
  onCleanup(() => server.stop());
  await server.start();
  const ports = [...SHARED.slice(0, 4), stallPort];
  const clients = await clientsFor(ports, { commandTimeout: STALL_COMMAND_TIMEOUT_MS });
  const subs = subjects(ours, clients, false, false);
  const per = ctx.quick ? 300 : 1500;
  const opts = (s: Subject, setup: string) => ({
    keys: [key(s, setup)],
    durationMs: per,
    maxOps: 100_000,
    opTimeoutMs: 5000,
    maxErrors: 20,
  });
  try {
    ctx.log(`5 nodes incl. ${stallPort}, healthy`);
    const healthy = await interleaved(
      subs,
      1,
      (s) => opts(s, 'healthy'),
      ctx.quick ? 50 : 300,
      () => {},
    );
    result.groups.push({ setup: '5 nodes, healthy', ports, results: healthy });
    ctx.log(`SIGSTOP redis-server ${stallPort} (pid ${server.pid})`);
    server.pause();
    const stalled = await interleaved(
      subs,
      1,
      (s) => opts(s, 'stalled'),
      0,
      () => {},
    );
    result.groups.push({ setup: '5 nodes, 1 stalled', ports, results: stalled });
  } finally {
    server.resume();
    await closeAll(subs, clients);
    await server.stop();
  }
}
