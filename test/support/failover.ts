/**
 * Killing a Redis master for failover tests, and putting the node back afterwards. Only servers
 * that scripts/services.sh started are killed (their pid files under /var/tmp/leasehold-services-<uid>/,
 * the same for every checkout: the services are machine-wide).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, '..', '..');
const STATE = process.env.LEASEHOLD_SERVICES_DIR ?? `/var/tmp/leasehold-services-${process.getuid?.() ?? 0}`;

/** The pid of the redis-server on `port` that services.sh started; throws if it did not start it. */
export function nodePid(port: number): number {
  const pid = Number(readFileSync(join(STATE, `redis-${port}.pid`), 'utf8').trim());
  const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  if (!cmd.includes(`:${port}`)) throw new Error(`pid ${pid} is not the redis-server on ${port}`);
  return pid;
}

/** Whether the redis-server that services.sh started on `port` is running (a stopped one is). */
export function nodeRunning(port: number): boolean {
  try {
    nodePid(port);
    return true;
  } catch {
    return false;
  }
}

/** SIGKILLs the redis-server on `port` that services.sh started; throws if it did not start it. */
export function killNode(port: number): void {
  process.kill(nodePid(port), 'SIGKILL');
}

/** Starts what is down of `service` again (the killed node rejoins as a replica). */
export async function restore(service: 'sentinel' | 'cluster'): Promise<void> {
  await run('bash', [join(ROOT, 'scripts', 'services.sh'), 'start', service], { timeout: 90_000 });
}

/**
 * Polls `probe` every 50 ms until it returns a value other than undefined, or throws at the
 * deadline. A probe that hangs (a cluster client asking a node that just died) counts as a miss
 * after 5 s, so the deadline holds and the error names what was awaited.
 */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const end = performance.now() + ms;
  let last: unknown;
  for (;;) {
    let timer: NodeJS.Timeout | undefined;
    const hung = new Promise<undefined>((resolve) => {
      timer = setTimeout(
        () => {
          last = new Error('the probe did not answer within 5 s');
          resolve(undefined);
        },
        Math.max(1, Math.min(5000, end - performance.now())),
      );
    });
    const v = await Promise.race([
      probe().catch((e: unknown) => {
        last = e;
        return undefined;
      }),
      hung,
    ]);
    clearTimeout(timer);
    if (v !== undefined) return v;
    if (performance.now() > end) {
      const why = last instanceof Error ? ` (last: ${last.message})` : '';
      throw new Error(`${what}: not within ${ms} ms${why}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A one-off plain connection to one node (no retries), closed after `fn`. */
export async function onNode<T>(port: number, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  r.on('error', () => {});
  try {
    await r.connect();
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

/**
 * Waits until every write so far on the master at `port` has reached a replica (`WAIT 1`
 * answers 1). After a restore the old master may still be re-syncing as the new replica, and
 * `WAIT` then times out with 0: a lock written meanwhile is not on any replica yet.
 */
export async function replicated(port: number): Promise<void> {
  await until('a replica acknowledging the writes', async () =>
    onNode(port, async (r) => (Number(await r.call('WAIT', '1', '1000')) >= 1 ? true : undefined)),
  );
}

/** The Sentinel setup's current master port, as the first Sentinel that answers says. */
export async function sentinelMasterPort(): Promise<number> {
  const { SENTINELS, SENTINEL_MASTER } = await import('./sentinel.js');
  let last: unknown;
  for (const s of SENTINELS) {
    try {
      return await onNode(s.port, async (r) => {
        const [, port] = (await r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SENTINEL_MASTER)) as [string, string];
        return Number(port);
      });
    } catch (e) {
      last = e;
    }
  }
  throw last;
}

/** Sentinel: kills the current master, waits until another node is named and accepts writes. */
export async function failover(): Promise<{ from: number; to: number }> {
  const from = await sentinelMasterPort();
  killNode(from);
  return { from, to: await promotedFrom(from) };
}

/** Sentinel: waits until a node other than `from` is named master and says it is one. */
async function promotedFrom(from: number): Promise<number> {
  return until('promotion', async () => {
    const p = await sentinelMasterPort();
    if (p === from) return undefined;
    const role = await onNode(p, (r) => r.role());
    return (role as unknown[])[0] === 'master' ? p : undefined;
  });
}

/**
 * Sentinel: SIGSTOPs the current master until the Sentinels have promoted its replica, then lets
 * it go on (SIGCONT, also when the promotion never came). It comes back as a master with its
 * clients connected and its data whole: two masters, until a Sentinel turns it into a replica
 * (some seconds later), which drops its data and its clients.
 */
export async function pauseMaster(): Promise<{ from: number; to: number }> {
  const from = await sentinelMasterPort();
  const pid = nodePid(from);
  process.kill(pid, 'SIGSTOP');
  try {
    return { from, to: await promotedFrom(from) };
  } finally {
    process.kill(pid, 'SIGCONT');
  }
}

/** Every node of the services' Redis Cluster (masters and replicas; scripts/services.d/cluster.sh). */
export const CLUSTER_PORTS = (process.env.LEASEHOLD_CLUSTER_PORTS ?? '7301 7302 7303 7304 7305 7306')
  .trim()
  .split(/\s+/)
  .map(Number);

/** Asks the first Cluster node that answers. */
async function anyClusterNode<T>(fn: (r: Redis) => Promise<T>): Promise<T> {
  let last: unknown;
  for (const port of CLUSTER_PORTS) {
    try {
      return await onNode(port, fn);
    } catch (e) {
      last = e;
    }
  }
  throw last;
}

/** The port of the Cluster master serving `key`'s slot, as a live node's CLUSTER SLOTS says. */
export async function clusterOwnerPort(key: string): Promise<number> {
  return anyClusterNode(async (r) => {
    const slot = Number(await r.cluster('KEYSLOT', key));
    const slots = (await r.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
    for (const [lo, hi, [, port]] of slots) if (slot >= lo && slot <= hi) return Number(port);
    throw new Error(`no owner for slot ${slot}`);
  });
}

/**
 * Redis Cluster: SIGKILLs the master serving `key`'s slot and waits until another node serves
 * that slot as master with cluster_state:ok (its replica, promoted after cluster-node-timeout).
 */
export async function clusterFailover(key: string): Promise<{ from: number; to: number }> {
  const from = await clusterOwnerPort(key);
  killNode(from);
  const to = await until('promotion', async () => {
    const p = await clusterOwnerPort(key);
    if (p === from) return undefined;
    const ok = await onNode(p, async (r) => {
      const role = (await r.role()) as unknown[];
      return role[0] === 'master' && /cluster_state:ok/.test(String(await r.cluster('INFO')));
    });
    return ok ? p : undefined;
  });
  return { from, to };
}

/**
 * Every Cluster node answers with cluster_state:ok, every master has a replica, and every
 * replica's link to its master is up: a replica still waiting for its first sync (a node just
 * brought back) could not be promoted if its master died now.
 */
export async function clusterSettled(ms = 60_000): Promise<void> {
  await until(
    'cluster settled',
    async () => {
      for (const port of CLUSTER_PORTS) {
        const ok = await onNode(port, async (r) => {
          const repl = String(await r.info('replication'));
          if (/role:slave/.test(repl) && !/master_link_status:up/.test(repl)) return false;
          if (/role:master/.test(repl) && /connected_slaves:0/.test(repl)) return false;
          return /cluster_state:ok/.test(String(await r.cluster('INFO')));
        });
        if (!ok) return undefined;
      }
      return true;
    },
    ms,
  );
}

/**
 * Sentinel: the master the Sentinels name is a master, every replica of it is online, and every
 * Sentinel names the same master and sees a replica it could promote (flags just `slave`, link to
 * that master up). A replica still syncing could not take over if the master died; nor could one
 * a Sentinel still counts as down from before its restart (it learns otherwise at its next
 * ping or INFO).
 */
export async function sentinelSettled(ms = 60_000): Promise<void> {
  const { SENTINELS, SENTINEL_MASTER } = await import('./sentinel.js');
  await until(
    'sentinel settled',
    async () => {
      const port = await sentinelMasterPort();
      const repl = String(await onNode(port, (r) => r.info('replication')));
      if (!/role:master/.test(repl)) return undefined;
      const replicas = [...repl.matchAll(/^slave\d+:.*state=(\w+)/gm)].map((m) => m[1]);
      if (replicas.length === 0 || replicas.some((s) => s !== 'online')) return undefined;
      for (const s of SENTINELS) {
        const [, p] = (await onNode(s.port, (r) => r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SENTINEL_MASTER))) as [
          string,
          string,
        ];
        if (Number(p) !== port) return undefined;
        const seen = (await onNode(s.port, (r) => r.call('SENTINEL', 'REPLICAS', SENTINEL_MASTER))) as string[][];
        const promotable = seen.some((fields) => {
          const f = new Map<string, string>();
          for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
          return (
            f.get('flags') === 'slave' && f.get('master-link-status') === 'ok' && Number(f.get('master-port')) === port
          );
        });
        if (!promotable) return undefined;
      }
      return true;
    },
    ms,
  );
}

/**
 * Starts whatever an earlier test killed and waits until the setup is whole again (see
 * clusterSettled / sentinelSettled). Every test file that uses the Cluster or Sentinel setup
 * calls it first, and every test that kills a node calls it last: test files run one after
 * another, and a file that met a half-recovered setup failed with CLUSTERDOWN in CI.
 */
export async function healed(service: 'sentinel' | 'cluster'): Promise<void> {
  if (service === 'sentinel') {
    await restore(service);
    await sentinelSettled();
    return;
  }
  try {
    await restore(service);
    await clusterSettled();
  } catch (e) {
    // the Cluster holds test data only: a setup that will not settle is created afresh (stop
    // removes the nodes' cluster configs) rather than failing every later file that needs it
    console.warn(`[failover] the Redis Cluster did not heal (${(e as Error).message}); creating it afresh`);
    await run('bash', [join(ROOT, 'scripts', 'services.sh'), 'stop', 'cluster'], { timeout: 90_000 });
    await restore(service);
    await clusterSettled();
  }
}
