/** 4. Scale of held leases: one child process per library on a dedicated redis-server (7301). */
import { fileURLToPath } from 'node:url';
import type { Ctx } from '../lib/ctx.js';
import { forkTs, onCleanup, RedisServer, stopChild } from '../lib/procs.js';
import { errText } from '../lib/stats.js';
import type { ScaleResult, ScaleSpec } from '../scale-child.js';

const CHILD = fileURLToPath(new URL('../scale-child.ts', import.meta.url));
export const SCALE_PORT = 7301;

export interface ScaleSection {
  n: number;
  windowMs: number;
  ttlMs: number;
  port: number;
  results: ScaleResult[];
  failures: { lib: string; error: string }[];
}

function runChild(spec: ScaleSpec, timeoutMs: number): Promise<ScaleResult> {
  const child = forkTs(CHILD, [], ['--expose-gc']);
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
    child.send(spec);
  }).finally(() => stopChild(child));
}

export async function scale(ctx: Ctx): Promise<ScaleSection> {
  const n = ctx.quick ? 1_000 : 10_000;
  const windowMs = ctx.quick ? 3_000 : 30_000;
  const ttlMs = 3_000;
  const server = new RedisServer(SCALE_PORT);
  onCleanup(() => server.stop());
  await server.start();
  const out: ScaleSection = { n, windowMs, ttlMs, port: SCALE_PORT, results: [], failures: [] };
  try {
    for (const lib of ['leasehold', 'redis-semaphore'] as const) {
      ctx.log(`${lib}: ${n} leases, ttl ${ttlMs}ms, window ${windowMs}ms`);
      try {
        const r = await runChild({ lib, n, windowMs, ttlMs, port: SCALE_PORT }, windowMs + 60_000);
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
  return out;
}
