/** 5a. Postgres: leasehold postgres(pool) acquire+release vs raw advisory locks on one connection. */
import {
  loadPostgres,
  pgClient,
  pgPool,
  postgresJsClient,
  probe,
  type Optional,
  type PostgresFactory,
} from '../lib/clients.js';
import type { Ctx } from '../lib/ctx.js';
import { sequentialRows, type LatencyResult } from '../lib/measure.js';
import { errText } from '../lib/stats.js';
import { driverSubject, leaseholdSubject, pgjsRawSubject, pgRawSubject, type Subject } from '../lib/subjects.js';

export interface PostgresSection {
  ours: { ready: boolean; reason?: string };
  /** pool size given to leasehold: one connection per held lock, one for LISTEN while waiting */
  poolMax: number;
  sequential: LatencyResult[];
  error?: string;
}

export const POOL_MAX = 2;
/** pool size given to leasehold in each contended worker process (bench/worker.ts) */
export const CONTENDED_POOL_MAX = 4;
const times = { ttlMs: 30_000, waitMs: 5_000 };

/** Loads and probes the Postgres backend once; the contended section reuses the verdict. */
export async function postgresReady(ctx: Ctx): Promise<Optional<PostgresFactory>> {
  return probe(await loadPostgres(), async (f) => {
    const pool = pgPool(POOL_MAX);
    const s = leaseholdSubject('probe', f(pool), times);
    try {
      await (await s.acquire(`bench:${ctx.runId}:probe`)).release();
    } finally {
      await s.close();
      await pool.end();
    }
  });
}

/** Deletes the run's rows from the backend's fence table (if the table exists). */
export async function purgePostgres(runId: string): Promise<void> {
  const c = await pgClient();
  try {
    const t = await c.query("SELECT to_regclass('public.leasehold_fences') IS NOT NULL AS ok");
    if (t.rows[0]?.ok === true) {
      await c.query('DELETE FROM public.leasehold_fences WHERE starts_with(key, $1)', [`leasehold:bench:${runId}:`]);
    }
    const h = await c.query("SELECT to_regclass('public.leasehold_holders') IS NOT NULL AS ok");
    if (h.rows[0]?.ok === true) {
      await c.query('DELETE FROM public.leasehold_holders WHERE starts_with(key, $1)', [`leasehold:bench:${runId}:`]);
    }
  } finally {
    await c.end();
  }
}

export async function postgresSection(ctx: Ctx, ours: Optional<PostgresFactory>): Promise<PostgresSection> {
  const out: PostgresSection = {
    ours: ours.ready ? { ready: true } : { ready: false, reason: ours.reason },
    poolMax: POOL_MAX,
    sequential: [],
  };
  const raw = await pgClient();
  const pool = pgPool(POOL_MAX);
  const pool2 = pgPool(POOL_MAX);
  // postgres.js, the other supported driver: its own floor and leasehold on it (after the pg rows,
  // which P5 reads)
  const js = postgresJsClient(POOL_MAX);
  const jsRaw = postgresJsClient(1);
  const subjects: Subject[] = [pgRawSubject(raw, 'try')];
  if (ours.ready) {
    subjects.push(leaseholdSubject('leasehold postgres()', ours.factory(pool), times));
    subjects.push(driverSubject('leasehold postgres() driver only (diagnostic)', ours.factory(pool2), times.ttlMs));
    subjects.push(pgjsRawSubject(await jsRaw.reserve()));
    subjects.push(leaseholdSubject('leasehold postgres() on postgres.js', ours.factory(js), times));
  }
  try {
    out.sequential = await sequentialRows(subjects, {
      runId: ctx.runId,
      tag: 'pg',
      quick: ctx.quick,
      perMs: 250,
      log: (x) => ctx.log(x),
    });
  } catch (e) {
    out.error = errText(e);
  } finally {
    await Promise.allSettled(subjects.map((s) => s.close()));
    await raw.end().catch(() => {});
    await pool.end().catch(() => {});
    await pool2.end().catch(() => {});
    await js.end({ timeout: 2 }).catch(() => {});
    await jsRaw.end({ timeout: 2 }).catch(() => {});
    await purgePostgres(ctx.runId).catch(() => {});
  }
  return out;
}
