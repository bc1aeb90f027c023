/** The Markdown report: goals first, then one table per section. */
import { pairedRatio, type LatencyResult } from '../lib/measure.js';
import type { ContendedRun } from '../sections/contended.js';
import { LEGACY_BATCHED_FLOOR, NAMES } from '../sections/uncontended.js';
import { pct, tailOf } from './tail.js';
import { sessionComparison, sessionLines } from './session.js';
import type { Goal, Results } from './types.js';

const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
const head = (cells: string[]) => [row(cells), row(cells.map(() => '---'))];
const verdict = (g: Goal) =>
  g.errors
    ? `**not met (errors: ${g.errors})**`
    : g.met === null
      ? 'not measured'
      : g.met
        ? `**met**${g.qualifier ? ` (${g.qualifier})` : ''}`
        : '**missed**';

function latencyRows(rs: LatencyResult[], floor?: LatencyResult): string[] {
  return rs.map((s) =>
    row([
      s.name,
      s.opsPerSec,
      s.total.p50,
      s.total.p99,
      s.acquire.p50,
      s.release.p50,
      floor ? `${pairedRatio(s.rounds.p50, floor.rounds.p50).toFixed(2)}×` : '',
      s.failed ? `${s.errors} (failed after p50 ${s.failed.p50} ms, max ${s.failed.max} ms)` : s.errors,
    ]),
  );
}

function contendedRows(runs: ContendedRun[]): string[] {
  return [
    ...head([
      'Library',
      'Configured as',
      'Handoffs/s',
      'Release → next grant p50 / p99 ms',
      'Wait p50 ms',
      'p99 ms',
      'p99.9 ms',
      'waits > 50 ms',
      'max ms',
      'Holder switches',
      'Commands per grant',
      'Client CPU ms per grant',
      'Errors',
    ]),
    ...runs.map((c) =>
      row([
        c.name + (c.incomplete ? ' (incomplete)' : ''),
        c.config,
        c.handoffsPerSec,
        c.handoff ? `${c.handoff.p50} / ${c.handoff.p99}` : '–',
        c.wait.p50,
        c.wait.p99,
        tailOf(c).p999,
        pct(tailOf(c)),
        c.wait.max,
        `${Math.round(c.switchRatio * 100)} %`,
        c.commandsPerGrant ?? '–',
        c.cpuMsPerGrant,
        c.errors,
      ]),
    ),
  ];
}

export function markdown(r: Results, chartFile: string): string {
  const m = r.meta;
  const L: string[] = [];
  L.push(
    `# leasehold benchmarks — ${m.date} on \`${m.host}\`${m.quick ? ' (quick smoke run: not for comparison)' : ''}`,
  );
  L.push('');
  L.push(
    `Node ${m.node}, ${m.platform}, ${m.cpus} × ${m.cpuModel}; Redis ${m.redisVersion}; PostgreSQL ${m.postgresVersion}; ` +
      `load average at start ${m.loadAvgAtStart.map((v) => v.toFixed(2)).join(' / ')}; run took ${(m.durationMs / 1000).toFixed(0)} s.`,
  );
  L.push('');
  L.push('Reproduce: `' + m.command + '` (services: `bash scripts/services.sh`). Method: docs/benchmarks.md.');
  L.push('');
  L.push('## Goals');
  L.push('');
  L.push(...head(['Goal', 'Target', 'Ratio', 'Measured', 'Result']));
  for (const g of r.goals)
    L.push(row([`${g.id} ${g.title}`, g.target, g.ratio === null ? '—' : `${g.ratio}`, g.measured, verdict(g)]));
  L.push('');
  const lh = ['Library', 'ops/s', 'p50 ms', 'p99 ms', 'acquire p50', 'release p50', 'p50 vs floor (paired)', 'errors'];
  if (r.uncontended) {
    const u = r.uncontended;
    L.push(`## 1. Uncontended acquire+release, one Redis (${u.port})`);
    L.push('');
    L.push('Sequential (one key, one caller):');
    L.push('');
    L.push(...head(lh), ...latencyRows(u.sequential, u.sequential[0]));
    L.push('');
    // with 64 keys P1's floor is the one on a client that batches a tick's writes, as leasehold does
    const batched = u.parallel.find((s) => s.name === NAMES.batchedFloor || s.name === LEGACY_BATCHED_FLOOR);
    const peersBatched = u.parallel.some((s) => s.name === NAMES.sesamecareBatched);
    L.push(
      '64 keys in parallel (one caller per key, one connection per library)' +
        (batched
          ? `; the ratio column is against ${batched.name}` +
            (peersBatched ? ' (P1 uses it and the peers on enableAutoPipelining clients too)' : '')
          : '') +
        ':',
    );
    L.push('');
    const plain = (s: LatencyResult) =>
      peersBatched && ([NAMES.floor, NAMES.sesamecare, NAMES.semaphore] as string[]).includes(s.name)
        ? { ...s, name: `${s.name}, plain client` }
        : s;
    L.push(...head(lh), ...latencyRows(u.parallel.map(plain), batched ?? u.parallel[0]));
    L.push('');
  }
  if (r.contended) {
    const o = r.contended.options;
    // Postgres and ZooKeeper rows have their own sections (5 and 6)
    const redisRuns = r.contended.runs.filter((c) => !c.lib.includes('pg') && !c.lib.includes('zk'));
    L.push(
      `## 2. Contended handoff: ${o.workers} processes, one key, ${o.csMs} ms critical section, ${o.grants} grants` +
        (o.warmGrants ? ` (after a discarded warm-up round of ${o.warmGrants})` : ''),
    );
    L.push('');
    L.push(...contendedRows(redisRuns));
    L.push('');
    L.push(`![wait per acquire under contention](${chartFile})`);
    L.push('');
    for (const f of r.contended.failures) L.push(`- ${f.name} failed: ${f.error}`);
  }
  if (r.redlock) {
    const rl = r.redlock;
    L.push('## 3. Redlock: acquire and release latency (sequential)');
    L.push('');
    if (!rl.ours.ready) L.push(`leasehold \`redlock()\` not measured: ${rl.ours.reason}`, '');
    L.push(
      ...head([
        'Setup',
        'Library',
        'acquire p50 ms',
        'acquire p99 ms',
        'release p50 ms',
        'release p99 ms',
        'ops',
        'errors',
      ]),
    );
    for (const g of rl.groups) {
      for (const s of g.results) {
        L.push(row([g.setup, s.name, s.acquire.p50, s.acquire.p99, s.release.p50, s.release.p99, s.ops, s.errors]));
      }
    }
    L.push('');
    if (rl.stall) {
      L.push(
        `Stall: nodes 7001..7004 plus our own redis-server on ${rl.stall.port}, stopped with SIGSTOP; every client ` +
          `has ioredis \`commandTimeout: ${rl.stall.commandTimeoutMs}\` (without it redis-semaphore's RedlockMutex waits forever).` +
          (rl.stall.error ? ` Failed: ${rl.stall.error}` : ''),
      );
      L.push('');
    }
  }
  if (r.scale) {
    const s = r.scale;
    L.push(
      `## 4. ${s.n} leases held with auto-renewal for ${s.windowMs / 1000} s (ttl ${s.ttlMs} ms, own Redis on ${s.port})`,
    );
    L.push('');
    L.push(
      ...head([
        'Library',
        'Renews every',
        'Redis commands/s',
        'Renewals/s',
        'Round trips/s',
        'Round trips per tick',
        'Redis CPU %',
        'Client CPU %',
        'Heap before → held MB',
        'Lost',
      ]),
    );
    for (const x of s.results) {
      L.push(
        row([
          (x.nodes ? `${x.lib} (${x.nodes} masters; round trips per node)` : x.lib) +
            (x.n !== s.n ? ` (${x.n} leases)` : '') +
            (x.control ? ', held without renewal (control)' : '') +
            (x.rounds ? ` (median of ${x.rounds.length} rounds of ${Math.round(x.windowMs / 1000)} s)` : ''),
          `${x.renewEveryMs} ms`,
          x.redisCommandsPerSec,
          x.renewalsPerSec,
          x.roundTripsPerSec,
          x.roundTripsPerTick,
          x.redisCpuPct,
          x.clientCpuPct,
          `${x.heapBeforeMB} → ${x.heapHeldMB}`,
          x.lost,
        ]),
      );
    }
    for (const f of s.failures) L.push(`- ${f.lib} failed: ${f.error}`);
    L.push('');
    const peer = s.results.find((x) => x.lib === 'redis-semaphore');
    const paired = sessionComparison(s);
    for (const x of s.results.filter((y) => y.lib === 'leasehold-session' && !y.control)) {
      const q = (a: number, b: number) => (b > 0 ? `${(a / b).toFixed(2)}×` : 'n/a');
      if (peer) {
        L.push(
          `- leasehold-session, ${x.n} leases: client CPU ${q(x.clientCpuPct, peer.clientCpuPct)} and Redis CPU ` +
            `${q(x.redisCpuPct, peer.redisCpuPct)} redis-semaphore's at ${peer.n} (goal ≤ 0.2×), ` +
            `${x.roundTripsPerTick} round trips per tick, ${x.lost} lost`,
        );
      }
      // what renewing costs: the row minus its control (the same leases held, nothing sent); with
      // rounds, the paired figures below
      const c = s.results.find((y) => y.lib === x.lib && y.control && y.n === x.n);
      if (c && !paired) {
        const d = (a: number, b: number) => Math.round((a - b) * 1000) / 1000;
        L.push(
          `- leasehold-session, ${x.n} leases, renewing them (the row minus its control): client CPU ` +
            `${d(x.clientCpuPct, c.clientCpuPct)} %, Redis CPU ${d(x.redisCpuPct, c.redisCpuPct)} % ` +
            `(holding them at rest: ${c.clientCpuPct} % and ${c.redisCpuPct} %)`,
        );
      }
    }
    if (paired) {
      const p6 = r.goals.find((g) => g.id === 'P6');
      L.push('');
      L.push(
        ...sessionLines(paired, p6 ? `${verdict(p6)}, ${p6.measured.split('. ')[0]} (Goals above)` : 'not scored'),
      );
    }
    L.push('');
    L.push('Redis commands/s counts the commands run inside scripts too (Redis 7 `total_commands_processed`).');
    L.push('');
  }
  if (r.postgres) {
    const p = r.postgres;
    L.push('## 5. Postgres advisory locks');
    L.push('');
    if (!p.ours.ready) L.push(`leasehold \`postgres()\` not measured: ${p.ours.reason}`, '');
    L.push(`Sequential acquire+release (raw: one connection; leasehold: a pg Pool of ${p.poolMax}):`, '');
    L.push(...head(lh), ...latencyRows(p.sequential, p.sequential[0]));
    L.push('');
    const pgRuns = r.contended?.runs.filter((c) => c.lib.includes('pg')) ?? [];
    if (pgRuns.length) {
      L.push('Contended handoff, as in 2:', '');
      L.push(...contendedRows(pgRuns), '');
    }
    if (p.error) L.push(`Error: ${p.error}`, '');
  }
  if (r.zookeeper) {
    const z = r.zookeeper;
    L.push('## 6. ZooKeeper');
    L.push('');
    L.push(`Sequential acquire+release on ${z.hosts} (standalone; raw: create + delete of an EPHEMERAL node):`, '');
    L.push(...head(lh), ...latencyRows(z.sequential, z.sequential[0]));
    L.push('');
    const zkRuns = r.contended?.runs.filter((c) => c.lib.includes('zk')) ?? [];
    if (zkRuns.length) {
      L.push('Contended handoff, as in 2:', '');
      L.push(...contendedRows(zkRuns), '');
    }
    if (z.error) L.push(`Error: ${z.error}`, '');
  }
  if (r.etcd) {
    const e = r.etcd;
    L.push('## 7. etcd');
    L.push('');
    L.push(
      `Sequential acquire+release on one etcd ${e.version} member (${e.hosts.join(', ')}); the floor is one put + one delete on the same client:`,
      '',
    );
    L.push(...head(lh), ...latencyRows(e.sequential, e.sequential[0]));
    L.push('');
    const etcdRuns = e.contended ?? [];
    if (etcdRuns.length) {
      L.push('Contended handoff, as in 2:', '');
      L.push(...contendedRows(etcdRuns), '');
    }
    if (e.error) L.push(`Error: ${e.error}`, '');
  }
  L.push('## Not run');
  L.push('');
  for (const n of m.notRun) L.push(`- ${n.name}: ${n.reason}`);
  L.push('');
  L.push('## Settings');
  L.push('');
  for (const [k, v] of Object.entries(m.settings)) L.push(`- ${k}: ${v}`);
  if (r.errors.length) {
    L.push('', '## Errors', '');
    for (const e of r.errors) L.push(`- ${e.section}: ${e.error}`);
  }
  L.push('');
  return L.join('\n');
}
