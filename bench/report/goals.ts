/** The goals P1..P5 (issue 5) and P6 (issue #17's session comparison), each computed from the measurements as a ratio with a verdict. */
import { LIBS } from '../sections/redlock.js';
import { LEGACY_BATCHED_FLOOR, NAMES } from '../sections/uncontended.js';
import { pairedRatio } from '../lib/measure.js';
import { round } from '../lib/stats.js';
import { pct, tailOf } from './tail.js';
import type { ContendedRun } from '../sections/contended.js';
import type { Goal, Results } from './types.js';
import { type Spread, pp, sessionComparison, spreadText } from './session.js';

const x = (v: number) => `${round(v)}×`;
const notMeasured = (g: Omit<Goal, 'ratio' | 'met' | 'measured'>, why: string): Goal => ({
  ...g,
  ratio: null,
  measured: `not measured: ${why}`,
  met: null,
});

interface Counted {
  name: string;
  errors: number;
}
/**
 * A verdict over subjects that had errors is refused: not met, whatever the ratios say (a failed
 * operation is in no latency figure and no ops/s), and the measured text names whose errors.
 */
function refuseOnErrors(goal: Goal, used: (Counted | undefined)[]): Goal {
  const bad = [...new Set(used)].filter((s): s is Counted => s !== undefined && s.errors > 0);
  if (bad.length === 0) return goal;
  const errors = bad.reduce((n, s) => n + s.errors, 0);
  const whose = bad.map((s) => `${s.name} ${s.errors}`).join(', ');
  return { ...goal, met: false, errors, measured: `not met (errors: ${whose}); ${goal.measured}` };
}

/** Redis contended runs are named after their library; these are the peers. */
export const PEER_LIBS = ['sesamecare', 'semaphore'] as const;
/** A stalled node "does not move" the acquire latency: stalled p50 within this factor of healthy. */
export const STALL_TOLERANCE = 1.2;

function p1(r: Results): Goal {
  const g = {
    id: 'P1',
    title: 'Uncontended Redis acquire+release',
    target: '≤ 1.10 × raw floor; ≥ every peer',
  } as const;
  const u = r.uncontended;
  if (!u) return notMeasured(g, 'section not run or failed');
  const by = (list: typeof u.sequential, name: string) => list.find((s) => s.name === name);
  const sf = by(u.sequential, NAMES.floor);
  const so = by(u.sequential, NAMES.ours);
  const pf = by(u.parallel, NAMES.floor);
  const po = by(u.parallel, NAMES.ours);
  if (!sf || !so || !pf || !po) return notMeasured(g, 'floor or leasehold missing');
  // With 64 keys leasehold's adapter batches a tick's scripts into one write, so its floor and its
  // peers are the ones on a client that batches too (ioredis enableAutoPipelining); runs before
  // the batched peers had a batched floor only (a diagnostic row, runs 12–16) or none (before 12).
  const pb = by(u.parallel, NAMES.batchedFloor) ?? by(u.parallel, LEGACY_BATCHED_FLOOR);
  const floor64 = pb ?? pf;
  // paired: the median over interleaved rounds of the per-round ratio
  const seq = pairedRatio(so.rounds.p50, sf.rounds.p50);
  const par = pairedRatio(floor64.rounds.opsPerSec, po.rounds.opsPerSec);
  const seqPeer = Math.max(...[NAMES.sesamecare, NAMES.semaphore].map((p) => by(u.sequential, p)?.opsPerSec ?? 0));
  const parPeers = [NAMES.sesamecare, NAMES.semaphore, NAMES.sesamecareBatched, NAMES.semaphoreBatched];
  const parPeer = Math.max(...parPeers.map((p) => by(u.parallel, p)?.opsPerSec ?? 0));
  const vsPeerSeq = so.opsPerSec / seqPeer;
  const vsPeerPar = po.opsPerSec / parPeer;
  // diagnostics, not in the target: leasehold on node-redis against leasehold on ioredis, and the
  // 64-key rate against the plain client's floor
  const sn = by(u.sequential, NAMES.oursNodeRedis);
  const extra =
    (sn ? `; node-redis: ${x(pairedRatio(sn.rounds.p50, so.rounds.p50))} leasehold on ioredis sequential` : '') +
    (pb
      ? `; 64 keys vs the plain client's floor: ${x(pairedRatio(pf.rounds.opsPerSec, po.rounds.opsPerSec))} its time per op`
      : '');
  const floor64Name = pb ? 'the batched floor' : 'the plain floor (no batched floor in this run)';
  const used = [sf, so, pf, pb, po, ...[NAMES.sesamecare, NAMES.semaphore].map((p) => by(u.sequential, p))];
  return refuseOnErrors(
    {
      ...g,
      ratio: round(seq),
      measured:
        `sequential p50 ${x(seq)} floor (pooled ${so.total.p50} vs ${sf.total.p50} ms); 64 keys: ${x(par)} ${floor64Name}'s ` +
        `time per op (${po.opsPerSec} vs ${floor64.opsPerSec} ops/s); vs fastest peer: ${x(vsPeerSeq)} its ops/s sequential, ` +
        `${x(vsPeerPar)} with 64 keys${extra}`,
      met: seq <= 1.1 && par <= 1.1 && vsPeerSeq >= 1 && vsPeerPar >= 1,
    },
    [...used, ...parPeers.map((p) => by(u.parallel, p))],
  );
}

/** Issue #16's bounds for the contended handoff (P2). */
export const P2_P99_MS = 10;
export const P2_MAX_FRACTION = 0.1;

/** Whether every consecutive pair of grants changed holder (the exact count when the run has it). */
function allSwitched(run: ContendedRun): boolean {
  return run.switches ? run.switches.of > 0 && run.switches.count === run.switches.of : run.switchRatio >= 1;
}

function p2(r: Results): Goal {
  const g = {
    id: 'P2',
    title: 'Contended handoff (8 processes)',
    target:
      `handoffs/s ≥ the fastest peer's; 100 % holder switches; p99 wait ≤ ${P2_P99_MS} ms; ` +
      "max wait ≤ 1/10 of the best peer's max; client CPU per grant ≤ the best peer's",
  } as const;
  const runs = r.contended?.runs ?? [];
  const ours = runs.find((x) => x.lib === 'leasehold');
  // the peer libraries only: the fair floor (fair-raw) is a diagnostic, not a peer
  const peers = runs.filter((x) => (PEER_LIBS as readonly string[]).includes(x.lib) && !x.incomplete);
  if (!ours || peers.length === 0) return notMeasured(g, 'leasehold or every peer run missing');
  const lowest = (f: (p: ContendedRun) => number) => peers.reduce((a, b) => (f(b) < f(a) ? b : a));
  const fastest = peers.reduce((a, b) => (b.handoffsPerSec > a.handoffsPerSec ? b : a));
  const lowMax = lowest((p) => p.wait.max);
  const lowCpu = lowest((p) => p.cpuMsPerGrant);
  const rate = ours.handoffsPerSec / fastest.handoffsPerSec;
  const maxBound = lowMax.wait.max * P2_MAX_FRACTION;
  const switched = ours.switches
    ? `${ours.switches.count} of ${ours.switches.of}`
    : `${round(ours.switchRatio * 100)} % (rounded)`;
  const checks: [name: string, ok: boolean, text: string][] = [
    [
      'handoffs/s',
      rate >= 1,
      `handoffs/s ${ours.handoffsPerSec} vs the fastest peer (${fastest.name}) ${fastest.handoffsPerSec}: ${x(rate)}`,
    ],
    ['holder switches', allSwitched(ours), `holder switches ${switched}`],
    ['p99', ours.wait.p99 <= P2_P99_MS, `p99 wait ${ours.wait.p99} ms vs the ${P2_P99_MS} ms bound`],
    [
      'max',
      ours.wait.max <= maxBound,
      `max wait ${ours.wait.max} ms vs the best peer max (${lowMax.name}) ${lowMax.wait.max} ms: ` +
        `${x(ours.wait.max / lowMax.wait.max)}, bound ${round(maxBound)} ms`,
    ],
    [
      'CPU per grant',
      ours.cpuMsPerGrant <= lowCpu.cpuMsPerGrant,
      `client CPU per grant ${ours.cpuMsPerGrant} ms vs the best peer (${lowCpu.name}) ${lowCpu.cpuMsPerGrant} ms: ` +
        `${x(ours.cpuMsPerGrant / lowCpu.cpuMsPerGrant)}`,
    ],
  ];
  const missed = checks.filter(([, ok]) => !ok).map(([name]) => name);
  if (ours.incomplete) missed.push('the run did not complete');
  // beside the verdict: each row's p99.9 and share of waits over 50 ms
  const tails = [ours, ...peers]
    .map((p) => {
      const t = tailOf(p);
      return `${p.name} p99.9 ${t.p999} ms, ${pct(t)} over 50 ms`;
    })
    .join('; ');
  return refuseOnErrors(
    {
      ...g,
      ratio: round(rate),
      measured:
        `${checks.map(([, ok, text]) => `${text} — ${ok ? 'met' : 'missed'}`).join('; ')}; ` +
        `${missed.length ? `missed: ${missed.join(', ')}` : 'all five met'}; tails: ${tails}`,
      met: missed.length === 0,
    },
    [ours, ...peers],
  );
}

function p3(r: Results): Goal {
  const g = {
    id: 'P3',
    title: 'Redlock 5 nodes, fenced',
    target: `acquire ≤ 2.3 × single node; a stalled node moves p50 by < ${STALL_TOLERANCE}×`,
  } as const;
  const rl = r.redlock;
  if (!rl) return notMeasured(g, 'section not run or failed');
  if (!rl.ours.ready) return notMeasured(g, `leasehold redlock() not ready (${rl.ours.reason ?? ''})`);
  const find = (setup: string, prefix: string) =>
    rl.groups.find((gr) => gr.setup === setup)?.results.find((s) => s.name.startsWith(prefix));
  const single = find('single node', `${LIBS.ours} redis()`);
  const five = find('5 nodes', `${LIBS.ours} redlock()`);
  const healthy = find('5 nodes, healthy', `${LIBS.ours} redlock()`);
  const stalled = find('5 nodes, 1 stalled', `${LIBS.ours} redlock()`);
  if (!single || !five) return notMeasured(g, 'single-node or 5-node run missing');
  const ratio = pairedRatio(five.rounds.acquireP50, single.rounds.acquireP50);
  // context: what one parallel round to 5 nodes costs here, relative to one node, for a peer
  const peer5 = find('5 nodes', LIBS.sesamecare);
  const peer1 = find('single node', LIBS.sesamecare);
  const peerRatio = peer5 && peer1 ? pairedRatio(peer5.rounds.acquireP50, peer1.rounds.acquireP50) : NaN;
  let stall = 'stall scenario not measured';
  let stallOk = false;
  if (healthy && stalled && stalled.ops > 0) {
    const s = stalled.acquire.p50 / healthy.acquire.p50;
    stallOk = s < STALL_TOLERANCE && stalled.errors === 0;
    stall = `one node stalled: acquire p50 ${stalled.acquire.p50} vs ${healthy.acquire.p50} ms healthy (${x(s)}), p99 ${stalled.acquire.p99} ms, ${stalled.errors} errors`;
  }
  return refuseOnErrors(
    {
      ...g,
      ratio: round(ratio),
      measured:
        `5-node acquire p50 ${x(ratio)} single node (pooled ${five.acquire.p50} vs ${single.acquire.p50} ms; for scale, ` +
        `${LIBS.sesamecare}'s one round to 5 nodes is ${x(peerRatio)} its single-node acquire here); ${stall}`,
      met: ratio <= 2.3 && stallOk,
    },
    [single, five, healthy, stalled],
  );
}

function p4(r: Results): Goal {
  const g = {
    id: 'P4',
    title: `${r.scale?.n ?? 10_000} held leases, auto-renewed`,
    target: '≤ 1 pipelined round trip per renewal tick; client CPU ≤ 5 % of a core',
  } as const;
  const ours = r.scale?.results.find((s) => s.lib === 'leasehold');
  if (!ours) return notMeasured(g, 'scale section not run or failed');
  const ticks = ours.windowMs / ours.renewEveryMs;
  const trips = ours.roundTripsPerTick * ticks;
  const ok = trips <= Math.floor(ticks) + 1 && ours.clientCpuPct <= 5 && ours.lost === 0;
  return {
    ...g,
    ratio: ours.roundTripsPerTick,
    measured:
      `${ours.roundTripsPerTick} round trips per ${ours.renewEveryMs} ms tick (${Math.round(trips)} in ${Math.round(ticks)} ticks), ` +
      `client CPU ${ours.clientCpuPct} % of a core, ${ours.lost} lost`,
    met: ok,
  };
}

function p5(r: Results): Goal {
  const g = { id: 'P5', title: 'Postgres acquire+release', target: '≤ 1.15 × raw advisory lock' } as const;
  const pg = r.postgres;
  if (!pg) return notMeasured(g, 'section not run or failed');
  if (!pg.ours.ready) return notMeasured(g, `leasehold postgres() not ready (${pg.ours.reason ?? ''})`);
  const raw = pg.sequential.find((s) => s.name.startsWith('raw'));
  const ours = pg.sequential.find((s) => s.name.startsWith('leasehold'));
  if (!raw || !ours) return notMeasured(g, pg.error ?? 'run missing');
  const ratio = pairedRatio(ours.rounds.p50, raw.rounds.p50);
  return refuseOnErrors(
    {
      ...g,
      ratio: round(ratio),
      measured: `p50 ${x(ratio)} raw (pooled ${ours.total.p50} vs ${raw.total.p50} ms; acquire ${ours.acquire.p50} vs ${raw.acquire.p50}, release ${ours.release.p50} vs ${raw.release.p50})`,
      met: ratio <= 1.15,
    },
    [raw, ours],
  );
}

/**
 * P6 (issue #17): 100,000 session leases cost no more than 10,000 (n and 10 × n; --quick: 1,000
 * and 10,000). Decided from the paired rounds of bench/sections/scale-session.ts, never from one
 * window per row (single 30 s windows, runs 16–18, put the difference far inside the run-to-run
 * noise: the verdict was a coin flip). The rule, for client CPU, Redis CPU and the two together:
 * per round, d = (10n row − its control) − (n row − its control), what renewing 10 × n costs more
 * than renewing n, in % of a core. Each of the three is
 *   - "no more" when the median d over the rounds is ≤ 0;
 *   - "within the noise" when the median d is > 0 but at least one round's d is ≤ 0 (zero lies
 *     inside the rounds' min–max of d: no round-to-round evidence of a difference; if there were
 *     none, all of 6 rounds would still come out above 0 by chance 1 time in 64, a sign test);
 *   - "more" when every round's d is > 0.
 * Met when none of the three is "more" and no lease of either row was lost; the measured text says
 * "within the noise" whenever that is what the verdict rests on, and gives every round's d. The
 * totals (10n row − n row, holding the leases at rest included) are given but not scored: holding
 * 10 × the leases costs heap and Redis housekeeping whether they are renewed or not
 * (docs/benchmarks.md, "Scale controls"). Runs before 2026-12-05 have no rounds: not measured.
 */
function p6(r: Results): Goal {
  const c = sessionComparison(r.scale);
  const g = {
    id: 'P6',
    title: `${c?.big ?? 100_000} session leases cost no more to renew than ${c?.n ?? 10_000} (#17)`,
    target: "renewing cost (row − its control) paired by round: median difference ≤ 0, or inside the rounds' spread",
  } as const;
  if (!c) return notMeasured(g, 'no session rows measured in rounds');
  const judge = (x: Spread) => (x.median <= 0 ? 'no more' : x.min <= 0 ? 'within the noise' : 'more');
  const parts = [
    ['client CPU', c.renewDiff.client],
    ['Redis CPU', c.renewDiff.redis],
    ['both', c.renewDiff.both],
  ] as const;
  const says = parts.map(([what, x]) => ({ what, x, word: judge(x) }));
  const more = says.filter((s) => s.word === 'more');
  const noise = says.filter((s) => s.word === 'within the noise');
  const met = more.length === 0 && c.lost === 0;
  const why = !met
    ? more.length
      ? `above the noise: ${c.big} cost more to renew than ${c.n} in every round (${more.map((s) => s.what).join(', ')})` +
        (c.lost ? `; ${c.lost} leases lost` : '')
      : `${c.lost} leases lost`
    : noise.length
      ? "within the noise: the median difference is above 0 but 0 is inside the rounds' spread (" +
        noise
          .map(
            (s) =>
              `${s.what}: median ${pp(s.x.median, true)}, ${s.x.values.filter((v) => v <= 0).length} of ${c.rounds} rounds ≤ 0`,
          )
          .join('; ') +
        ')'
      : 'the median difference is ≤ 0';
  const renew = (x: { client: Spread; redis: Spread }) =>
    `client ${spreadText(x.client)} %, Redis ${spreadText(x.redis)} %`;
  return {
    ...g,
    ratio: c.renewSmall.both.median > 0 ? round(c.renewLarge.both.median / c.renewSmall.both.median) : null,
    measured:
      `${why}. ${c.rounds} rounds of ${c.windowMs / 1000} s, the four rows measured at once. ` +
      `Renewing ${c.big} − renewing ${c.n}, per round: ` +
      says
        .map(
          (s) =>
            `${s.what} ${s.x.values.map((v) => pp(v, true)).join(', ')} (median ${pp(s.x.median, true)}: ${s.word})`,
        )
        .join('; ') +
      ` % of a core. Renewing ${c.n}: ${renew(c.renewSmall)}; renewing ${c.big}: ${renew(c.renewLarge)} (median, min to max). ` +
      `Totals (${c.big} row − ${c.n} row, holding included, not scored): client ${spreadText(c.totalDiff.client, true)} %, ` +
      `Redis ${spreadText(c.totalDiff.redis, true)} %. Lost ${c.lost}`,
    met,
    ...(met && noise.length ? { qualifier: 'within the noise' } : {}),
  };
}

/** Every subject's errors, one entry each, for results.errors (and so the exit code). */
export function subjectErrors(r: Results): { section: string; error: string }[] {
  const out: { section: string; error: string }[] = [];
  const add = (section: string, s: Counted & { lastError?: string }) => {
    if (s.errors > 0)
      out.push({ section: `${section} ${s.name}`, error: `${s.errors} errors; last: ${s.lastError ?? '?'}` });
  };
  for (const s of [...(r.uncontended?.sequential ?? []), ...(r.uncontended?.parallel ?? [])]) add('uncontended', s);
  for (const c of r.contended?.runs ?? []) add('contended', c);
  for (const gr of r.redlock?.groups ?? []) for (const s of gr.results) add(`redlock ${gr.setup}:`, s);
  for (const s of r.postgres?.sequential ?? []) add('postgres', s);
  for (const s of r.zookeeper?.sequential ?? []) add('zookeeper', s);
  for (const s of r.etcd?.sequential ?? []) add('etcd', s);
  for (const c of r.etcd?.contended ?? []) add('etcd contended', c);
  return out;
}

export function goals(r: Results): Goal[] {
  return [p1(r), p2(r), p3(r), p4(r), p5(r), p6(r)];
}
