/**
 * 4. Scale of held leases: one child process per library on a dedicated redis-server (a free
 * port), and leasehold on the services' Redis Cluster (7301..) when it is up.
 */
import { fileURLToPath } from 'node:url';
import { Cluster } from 'ioredis';
import { freePort } from '../../test/support/ports.js';
import type { Ctx } from '../lib/ctx.js';
import { forkTs, onCleanup, RedisServer, stopChild } from '../lib/procs.js';
import { closeOnStop } from '../lib/scope.js';
import { errText } from '../lib/stats.js';
import type { ScaleResult, ScaleSpec } from '../scale-child.js';
import { type SessionRounds, sessionRounds } from './scale-session.js';

const CHILD = fileURLToPath(new URL('../scale-child.ts', import.meta.url));

/** Whether the services' Redis Cluster answers with cluster_state:ok (else its row is not measured). */
async function clusterUp(): Promise<boolean> {
  const nodes = (process.env.LEASEHOLD_CLUSTER_NODES ?? '127.0.0.1:7301').split(',').map((hp) => ({
    host: hp.split(':')[0]!,
    port: Number(hp.split(':')[1]),
  }));
  const c = new Cluster(nodes, { lazyConnect: true, clusterRetryStrategy: () => null });
  c.on('error', () => {});
  closeOnStop(() => c.disconnect());
  try {
    await c.connect();
    return /cluster_state:ok/.test(String(await c.cluster('INFO')));
  } catch {
    return false;
  } finally {
    c.disconnect();
  }
}

export interface ScaleSection {
  n: number;
  windowMs: number;
  ttlMs: number;
  port: number;
  results: ScaleResult[];
  failures: { lib: string; error: string }[];
  /** how the session rows (leasehold-session and controls) were measured; absent before 2026-12-05 */
  session?: SessionRounds;
}

/**
 * The session comparison's rounds: 6 × 20 s measures each of the four rows for 120 s (four 30 s
 * windows one after another did 30 s each, in about the same time), after a 5 s warm-up window
 * that is not counted; --quick: 2 × 1 s, to see it work.
 */
const SESSION_ROUNDS = {
  full: { rounds: 6, windowMs: 20_000, warmupMs: 5_000 },
  quick: { rounds: 2, windowMs: 1_000, warmupMs: 0 },
};

function runChild(spec: ScaleSpec, timeoutMs: number): Promise<ScaleResult> {
  // --no-memory-reducer, for every library alike: V8's memory reducer shrinks the heap with a few
  // full GCs some 10–20 s after the acquisition burst ends, at a time of its own choosing. When they
  // fell inside the window they were most of its CPU (100,000 leases in session mode: 5 s windows
  // at 3.3–4.2 % with them, 0.10–0.12 % without), so the row measured when the reducer ran, not
  // what holding and renewing the leases costs (docs/benchmarks.md, "Scale").
  const child = forkTs(CHILD, [], ['--expose-gc', '--no-memory-reducer']);
  return new Promise<ScaleResult>((resolve, reject) => {
    const t = setTimeout(
      () => reject(new Error(`scale child (${spec.lib}) timed out after ${timeoutMs}ms`)),
      timeoutMs,
    );
    child.once('message', (m: { ok: true; result: ScaleResult } | { ok: false; error: string }) => {
      clearTimeout(t);
      if (m.ok) resolve(m.result);
      else reject(new Error(m.error));
    });
    child.once('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`scale child (${spec.lib}) exited with ${code}`));
    });
    child.send(spec, () => {}); // a child already gone reports through 'exit'
  }).finally(() => stopChild(child));
}

export async function scale(ctx: Ctx): Promise<ScaleSection> {
  const n = ctx.quick ? 1_000 : 10_000;
  // --quick (CI's smoke run): three renewal ticks of a 1 s TTL, enough to see renewals work
  const windowMs = ctx.quick ? 1_000 : 30_000;
  const ttlMs = ctx.quick ? 1_000 : 3_000;
  const port = await freePort(); // never a fixed port: a Redis Cluster or another run may hold it
  const server = new RedisServer(port);
  onCleanup(() => server.stop());
  await server.start();
  const out: ScaleSection = { n, windowMs, ttlMs, port, results: [], failures: [] };
  try {
    for (const lib of ['leasehold', 'redis-semaphore'] as const) {
      ctx.signal.throwIfAborted(); // past the section's budget: no next child
      ctx.log(`${lib}: ${n} leases, ttl ${ttlMs}ms, window ${windowMs}ms`);
      try {
        const r = await runChild({ lib, n, windowMs, ttlMs, port }, windowMs + 60_000);
        out.results.push(r);
        ctx.log(
          `  ${r.redisCommandsPerSec} cmd/s, ${r.roundTripsPerSec} round trips/s, client CPU ${r.clientCpuPct}%, ` +
            `heap ${r.heapHeldMB} MB, lost ${r.lost}`,
        );
      } catch (e) {
        out.failures.push({ lib, error: errText(e) });
        ctx.log(`  failed: ${errText(e)}`);
      }
    }
  } finally {
    await server.stop();
  }
  // session renewal (issue #17): n and 10 × n leases, each with its control, in paired rounds
  ctx.signal.throwIfAborted();
  const plan = SESSION_ROUNDS[ctx.quick ? 'quick' : 'full'];
  const session = await sessionRounds(ctx, { n, ttlMs, ...plan, childPath: CHILD });
  out.results.push(...session.results);
  out.failures.push(...session.failures);
  if (session.results.length) out.session = { ...plan, simultaneous: true };
  ctx.signal.throwIfAborted();
  if (await clusterUp()) {
    ctx.log(`leasehold on Redis Cluster: ${n} leases, ttl ${ttlMs}ms, window ${windowMs}ms`);
    try {
      const r = await runChild({ lib: 'leasehold-cluster', n, windowMs, ttlMs, port: 0 }, windowMs + 60_000);
      out.results.push(r);
      ctx.log(
        `  ${r.roundTripsPerTick} round trips per node per tick (${r.nodes} masters), ${r.redisCommandsPerSec} cmd/s, ` +
          `client CPU ${r.clientCpuPct}%, lost ${r.lost}`,
      );
    } catch (e) {
      out.failures.push({ lib: 'leasehold-cluster', error: errText(e) });
      ctx.log(`  failed: ${errText(e)}`);
    }
  } else {
    ctx.log('leasehold on Redis Cluster: not measured (no cluster on 7301..; bash scripts/services.sh cluster)');
  }
  return out;
}
