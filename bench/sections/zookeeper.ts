/**
 * 6. ZooKeeper (the standalone server on 127.0.0.1:2181): leasehold zookeeper() acquire+release
 * against the raw floor — create + delete of an EPHEMERAL node on the same kind of client, two
 * round trips — and the contended handoff of section 2 (8 processes, fair by sequence).
 */
import { randomBytes } from 'node:crypto';
import type { ZookeeperBackend } from '../../src/backends/zookeeper/index.js';
import { connectZookeeper } from '../lib/leasehold.js';
import type { Ctx } from '../lib/ctx.js';
import { sequentialRows, type LatencyResult } from '../lib/measure.js';
import { closeOnStop } from '../lib/scope.js';
import { errText } from '../lib/stats.js';
import { driverSubject, leaseholdSubject, type Subject } from '../lib/subjects.js';

export const ZK_HOSTS = process.env.LEASEHOLD_ZK_HOSTS ?? '127.0.0.1:2181';
const times = { ttlMs: 30_000, waitMs: 5_000 };

export interface ZookeeperSection {
  hosts: string;
  sequential: LatencyResult[];
  error?: string;
}

/** leasehold's own client, as fromUrl makes it (session timeout = the ttl). */
export const zkBackend = async (): Promise<ZookeeperBackend> => {
  const b = await connectZookeeper(ZK_HOSTS, { sessionTimeout: times.ttlMs, connectTimeout: 5000 });
  closeOnStop(() => b.close()); // closed with a section stopped past its budget (lib/scope.ts)
  return b;
};

type Cb = (e: unknown, r?: unknown) => void;
const call = (fn: (cb: Cb) => void): Promise<unknown> =>
  new Promise((resolve, reject) => fn((e, r) => (e ? reject(e as Error) : resolve(r))));

/** The floor: create an EPHEMERAL node (its parent exists), then delete it. */
async function rawSubject(runId: string): Promise<Subject> {
  const name: string = 'node-zookeeper-client';
  const zk = ((await import(name)) as { default?: any }).default ?? (await import(name));
  const c = zk.createClient(ZK_HOSTS, { sessionTimeout: times.ttlMs });
  closeOnStop(() => c.close());
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`ZooKeeper at ${ZK_HOSTS} did not answer`)), 5000);
    c.once('connected', () => (clearTimeout(t), resolve()));
    c.connect();
  });
  const dir = `/leasehold-bench-${runId}`;
  await call((cb) => c.create(dir, cb)).catch(() => {});
  return {
    name: 'raw create+delete EPHEMERAL (floor)',
    async acquire(key) {
      const path = `${dir}/${key.replace(/\W+/g, '_')}-${randomBytes(6).toString('hex')}`;
      await call((cb) => c.create(path, null, zk.CreateMode.EPHEMERAL, cb));
      return { release: () => call((cb) => c.remove(path, -1, cb)) };
    },
    async close() {
      await call((cb) => c.removeRecursive(dir, -1, cb)).catch(() => {});
      c.close();
    },
  };
}

export async function zookeeperSection(ctx: Ctx): Promise<ZookeeperSection> {
  const out: ZookeeperSection = { hosts: ZK_HOSTS, sequential: [] };
  const subjects: Subject[] = [];
  try {
    subjects.push(await rawSubject(ctx.runId));
    subjects.push(leaseholdSubject('leasehold zookeeper()', await zkBackend(), times));
    subjects.push(driverSubject('leasehold zookeeper() driver only (diagnostic)', await zkBackend(), times.ttlMs));
    out.sequential = await sequentialRows(subjects, {
      runId: ctx.runId,
      tag: 'zk',
      quick: ctx.quick,
      perMs: 250,
      log: (x) => ctx.log(x),
    });
  } catch (e) {
    out.error = errText(e);
  } finally {
    await Promise.allSettled(subjects.map((s) => s.close()));
  }
  return out;
}

/** Null when the server answers, else why not. */
export async function zookeeperReady(): Promise<string | null> {
  try {
    const b = await zkBackend();
    await b.close();
    return null;
  } catch (e) {
    return `${errText(e)} — run \`bash scripts/services.sh\``;
  }
}
