/**
 * The Postgres contended row of `npm run bench` (section 5, issue #17's goal: 8 processes, one key,
 * p99 wait ≤ 2× the server's own blocking `pg_advisory_lock` queue at ≥ its throughput), paired:
 * the raw floor and leasehold run alternately, round by round, in one invocation, each on its own
 * fresh pool of 8 worker processes (bench/sections/contended.ts, with its warm-up round), so drift
 * in machine load hits them alike. The order of the subjects rotates every round.
 *
 *   npx tsx bench/pg-contended.ts [--rounds 5] [--grants 2000] [--dist <dir> …]
 *
 * `--dist` (several: one leasehold row each) compares builds side by side, e.g. one of an older
 * commit copied inside the checkout (`cp -r dist scratch/dist-base`); default: dist/.
 * Reports per subject the median and range of handoffs/s, wait p50/p99 and client CPU per grant,
 * and per round the ratio to the raw floor of that round.
 */
import type { Ctx } from './lib/ctx.js';
import { installCleanup, runCleanup } from './lib/procs.js';
import { contended, contendedOptions, type ContendedRun } from './sections/contended.js';
import { purgePostgres } from './sections/postgres.js';
import { dists as listDists, opt } from './lib/argv.js';

const dists = listDists();
const ROUNDS = opt('rounds', 5);
const GRANTS = opt('grants', 2_000);

installCleanup();
const runId = `pgc${process.pid}`;
const ctx: Ctx = {
  quick: false,
  runId,
  log: (line) => console.log(`    ${line}`),
  signal: new AbortController().signal,
};
const o = { ...contendedOptions(ctx), grants: GRANTS, warmGrants: GRANTS };

interface Subj {
  name: string;
  lib: 'pg-raw' | 'leasehold-pg';
  dist?: string;
}
const subjects: Subj[] = [
  { name: 'raw pg_advisory_lock (floor)', lib: 'pg-raw' },
  ...dists.map((d): Subj => ({
    name: `leasehold (${d.split('/').slice(-2).join('/')})`,
    lib: 'leasehold-pg',
    dist: d,
  })),
];
/** Per subject, one entry per round (null: that round failed), so that ratios pair rounds. */
const results = new Map<string, (ContendedRun | null)[]>(subjects.map((s) => [s.name, []]));

console.log(
  `${o.workers} processes, one key, cs ${o.csMs} ms; ${ROUNDS} rounds × ${o.grants} grants (after ${o.warmGrants} warm-up)`,
);
try {
  for (let r = 0; r < ROUNDS; r++) {
    const order = subjects.map((_, i) => subjects[(i + r) % subjects.length]!);
    for (const s of order) {
      // the workers are forked by contended() with this environment (bench/lib/leasehold.ts)
      if (s.dist) process.env.LEASEHOLD_BENCH_DIST = s.dist;
      else delete process.env.LEASEHOLD_BENCH_DIST;
      const { runs, failures } = await contended(ctx, [{ lib: s.lib, name: s.name, config: '' }], o);
      if (failures.length) console.log(`  round ${r + 1} ${s.name}: FAILED ${failures[0]!.error}`);
      const run = runs[0] ?? null;
      results.get(s.name)![r] = run;
      if (!run) continue;
      console.log(
        `  round ${r + 1} ${s.name}: ${run.handoffsPerSec}/s, wait p50 ${run.wait.p50} p99 ${run.wait.p99} ms, ` +
          `handoff p50 ${run.handoff?.p50} ms, CPU ${run.cpuMsPerGrant} ms/grant${run.incomplete ? ' INCOMPLETE' : ''}`,
      );
    }
  }
} finally {
  await purgePostgres(runId).catch(() => {});
  await runCleanup();
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const span = (xs: number[], d = 0) =>
  `${median(xs).toFixed(d)} (${Math.min(...xs).toFixed(d)}–${Math.max(...xs).toFixed(d)})`;
const floor = results.get(subjects[0]!.name)!;
console.log('\n| subject | handoffs/s | wait p50 ms | wait p99 ms | CPU ms/grant | throughput / raw | p99 / raw |');
console.log('|---|--:|--:|--:|--:|--:|--:|');
for (const s of subjects) {
  const all = results.get(s.name)!;
  const rs = all.filter((x): x is ContendedRun => !!x);
  if (rs.length === 0) continue;
  // per round against that round's floor (paired; rounds where either failed are left out)
  const pairs = all.flatMap((x, i) => (x && floor[i] ? [[x, floor[i]!] as const] : []));
  const tp = pairs.map(([x, f]) => x.handoffsPerSec / f.handoffsPerSec);
  const p99 = pairs.map(([x, f]) => x.wait.p99 / f.wait.p99);
  console.log(
    `| ${s.name} | ${span(rs.map((x) => x.handoffsPerSec))} | ${span(
      rs.map((x) => x.wait.p50),
      2,
    )} | ${span(
      rs.map((x) => x.wait.p99),
      2,
    )} | ${span(
      rs.map((x) => x.cpuMsPerGrant),
      3,
    )} | ${span(tp, 2)} | ${span(p99, 2)} |`,
  );
}
process.exit(0);
