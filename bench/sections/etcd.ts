/**
 * 6. etcd: leasehold etcd(client) acquire+release against the floor (one put + one delete on the
 * same client), sequential and interleaved; then the 8-process contended handoff of section 2 on
 * etcd (here, so that it has this section's time budget).
 */
import type { Etcd3 } from 'etcd3';
import { etcd } from '../lib/leasehold.js';
import { etcdClient, ETCD_HOSTS } from '../lib/clients.js';
import { contended, type ContendedOptions, type ContendedRun } from './contended.js';
import type { Ctx } from '../lib/ctx.js';
import { sequentialRows, type LatencyResult } from '../lib/measure.js';
import { errText, within } from '../lib/stats.js';
import { driverSubject, etcdRawSubject, leaseholdSubject, type Subject } from '../lib/subjects.js';

export interface EtcdSection {
  hosts: string[];
  version: string;
  sequential: LatencyResult[];
  /** The contended handoff of section 2, on etcd. */
  contended: ContendedRun[];
  error?: string;
}

const times = { ttlMs: 30_000, waitMs: 5_000 };

/** etcd answers and leasehold etcd() can lock and unlock once: ready (the version), or why not. */
export async function etcdReady(
  ctx: Ctx,
): Promise<{ ready: true; version: string } | { ready: false; reason: string }> {
  let c: Etcd3 | null = null;
  try {
    c = await etcdClient();
    const version = (await c.maintenance.status()).version;
    const s = leaseholdSubject('probe', etcd(c), times);
    try {
      await within(
        s.acquire(`bench:${ctx.runId}:etcd-probe`).then((h) => h.release()),
        10_000,
        'etcd probe',
      );
    } finally {
      await s.close();
    }
    return { ready: true, version };
  } catch (e) {
    return { ready: false, reason: errText(e) };
  } finally {
    c?.close();
  }
}

/** Deletes the run's keys (the floor's and any entry a failed run left). */
async function purgeEtcd(c: Etcd3, runId: string): Promise<void> {
  for (const p of [`bench-raw/bench:${runId}:`, `leasehold:bench:${runId}:`]) await c.delete().prefix(p);
}

export async function etcdSection(ctx: Ctx, version: string, co: ContendedOptions): Promise<EtcdSection> {
  const out: EtcdSection = { hosts: ETCD_HOSTS, version, sequential: [], contended: [] };
  const raw = await etcdClient();
  const ours = await etcdClient();
  const driver = await etcdClient();
  const subjects: Subject[] = [
    etcdRawSubject(raw),
    leaseholdSubject('leasehold etcd()', etcd(ours), times),
    driverSubject('leasehold etcd() driver only (diagnostic)', etcd(driver), times.ttlMs),
  ];
  try {
    out.sequential = await sequentialRows(subjects, {
      runId: ctx.runId,
      tag: 'etcd',
      quick: ctx.quick,
      perMs: 500,
      log: (x) => ctx.log(x),
    });
  } catch (e) {
    out.error = errText(e);
  } finally {
    await Promise.allSettled(subjects.map((s) => s.close()));
    await purgeEtcd(raw, ctx.runId).catch(() => {});
    for (const c of [raw, ours, driver]) c.close();
  }
  if (out.error) return out;
  const plan = { lib: 'leasehold-etcd' as const, name: 'leasehold (etcd)', config: 'a watch on the entry ahead, FIFO' };
  const c = await contended(ctx, [plan], co);
  out.contended = c.runs;
  if (c.failures.length) out.error = c.failures.map((f) => `${f.name}: ${f.error}`).join('; ');
  return out;
}
