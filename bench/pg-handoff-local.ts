/**
 * Steady-state hand-over on Postgres, client side (the Postgres twin of bench/handoff-local.ts):
 * W waiters in one process (each its own Locks, postgres() backend and pg Pool, as W services
 * would have) pass one key round as fast as they can: acquire → release → acquire, no critical
 * section (or `--cs <ms>`). Every grant is a hand-over out of the server's lock queue. Measured
 * after a warm-up of as many grants: grants/s, this process's CPU per grant (process.cpuUsage) and
 * the statements sent per grant (counted on the pools' clients).
 *
 * The floor: the same W, each on its own connection, in a blocking `pg_advisory_lock` /
 * `pg_advisory_unlock` loop (the server's own queue, no fence). Subjects alternate round by round
 * in one process, so drift in machine load hits them alike.
 *
 *   npx tsx bench/pg-handoff-local.ts [--rounds 5] [--waiters 3] [--grants 3000] [--cs 0]
 *                                     [--dist <dir> …]   (default: dist/; several: one row each)
 *
 * With LEASEHOLD_BENCH_PROFILE=<dir>, each measured window is CPU-profiled (the stop is counted).
 */
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { advisoryKeyOf } from './lib/pgkey.js';
import { startProfile } from './lib/profile.js';
import { dists as listDists, opt } from './lib/argv.js';

const URL = process.env.LEASEHOLD_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const dists = listDists();
const ROUNDS = opt('rounds', 5);
const W = opt('waiters', 3);
const N = opt('grants', 3_000);
const CS = opt('cs', 0);

interface Row {
  name: string;
  run(key: string, granted: () => void, stop: () => boolean): Promise<() => Promise<void>>;
}

const pause = () => (CS > 0 ? new Promise<void>((r) => setTimeout(r, CS)) : null);

/** Statements sent on `pool`'s clients (every query a pg Client is handed). */
let statements = 0;
function counting(pool: pg.Pool): pg.Pool {
  pool.on('connect', (c: any) => {
    const q = c.query.bind(c);
    c.query = (...a: unknown[]) => {
      statements++;
      return q(...a);
    };
  });
  return pool;
}

async function leaseholdRow(dist: string): Promise<Row> {
  const { createLocks } = await import(pathToFileURL(`${dist}/index.js`).href);
  const { postgres } = await import(pathToFileURL(`${dist}/backends/postgres/index.js`).href);
  return {
    name: `leasehold (${dist.split('/').slice(-2).join('/')})`,
    async run(key, granted, stop) {
      const pools = Array.from({ length: W }, () => counting(new pg.Pool({ connectionString: URL, max: 4 })));
      const all = pools.map((p) => createLocks(postgres(p), { ttl: 5_000, wait: 30_000 }));
      await Promise.all(all.map(async (l, i) => (await l.acquire(`${key}:warm:${i}`)).release()));
      const loops = all.map(async (locks) => {
        while (!stop()) {
          const lease = await locks.acquire(key);
          granted();
          await pause();
          await lease.release();
        }
      });
      return async () => {
        await Promise.all(loops);
        await Promise.all(all.map((l) => l.close()));
        await Promise.all(pools.map((p) => p.end()));
      };
    },
  };
}

const floorRow: Row = {
  name: 'raw pg_advisory_lock (floor)',
  async run(key, granted, stop) {
    const clients = await Promise.all(
      Array.from({ length: W }, async () => {
        const c = new pg.Client({ connectionString: URL });
        await c.connect();
        const q = c.query.bind(c);
        (c as any).query = (...a: unknown[]) => {
          statements++;
          return (q as any)(...a);
        };
        return c;
      }),
    );
    const k = advisoryKeyOf(key);
    const loops = clients.map(async (c) => {
      while (!stop()) {
        await c.query('SELECT pg_advisory_lock($1)', [k]);
        granted();
        await pause();
        await c.query('SELECT pg_advisory_unlock($1)', [k]);
      }
    });
    return async () => {
      await Promise.all(loops);
      await Promise.all(clients.map((c) => c.end()));
    };
  },
};

/** Voluntary context switches of this process: each time it slept (in epoll, or on a lock). */
const switches = () => process.resourceUsage().voluntaryContextSwitches;

async function measure(row: Row, round: number, index: number) {
  const key = `bench:pg-handoff-local:${process.pid}:${round}:${index}`;
  let grants = 0;
  let stopped = false;
  let last = 0;
  /** gaps between consecutive grants in the measured window: the longest, and how many > 50 ms */
  const gaps = { on: false, max: 0, over50: 0 };
  const finish = await row.run(
    key,
    () => {
      grants++;
      const t = performance.now();
      if (gaps.on && t - last > gaps.max) gaps.max = t - last;
      if (gaps.on && t - last > 50) gaps.over50++;
      last = t;
    },
    () => stopped,
  );
  const reach = (n: number) =>
    new Promise<void>((r) => {
      const t = setInterval(() => grants >= n && (clearInterval(t), r()), 2);
    });
  await reach(N); // warm-up: as many grants as the measured window
  // LEASEHOLD_BENCH_PROFILE=<dir>: the measured window is CPU-profiled (lib/profile.ts)
  const stop = await startProfile(`pg-handoff-local/${index}-${round}`);
  const [g0, s0, c0, t0, v0] = [grants, statements, process.cpuUsage(), performance.now(), switches()];
  gaps.on = true;
  await reach(g0 + N);
  await stop();
  const [g1, s1, c, t1, v1] = [grants, statements, process.cpuUsage(c0), performance.now(), switches()];
  stopped = true;
  await finish();
  const g = g1 - g0;
  return {
    perSec: g / ((t1 - t0) / 1000),
    cpuUs: (c.user + c.system) / g,
    statements: (s1 - s0) / g,
    wakeups: (v1 - v0) / g,
    maxGap: gaps.max,
    over50: gaps.over50,
  };
}

const rows: Row[] = [...(await Promise.all(dists.map(leaseholdRow))), floorRow];
const results = new Map<string, Awaited<ReturnType<typeof measure>>[]>();
console.log(`${W} waiters in one process, one key, cs ${CS} ms; ${ROUNDS} rounds × ${N} grants (after ${N} warm-up)`);
for (let r = 0; r < ROUNDS; r++) {
  const order = rows.map((_, i) => rows[(i + r) % rows.length]!);
  for (const row of order) {
    const m = await measure(row, r, rows.indexOf(row));
    (results.get(row.name) ?? results.set(row.name, []).get(row.name)!).push(m);
    console.log(
      `  round ${r + 1} ${row.name}: ${m.perSec.toFixed(0)} grants/s, ${m.cpuUs.toFixed(1)} µs CPU per grant, ` +
        `${m.statements.toFixed(2)} statements and ${m.wakeups.toFixed(2)} sleeps (voluntary context switches) per grant, ` +
        `longest gap ${m.maxGap.toFixed(1)} ms, ${m.over50} gaps > 50 ms`,
    );
  }
}
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const floor = results.get(floorRow.name)!;
console.log(
  '\n| subject | grants/s (median, min–max) | client CPU µs per grant (median, min–max) | CPU vs floor | statements per grant | sleeps per grant |',
);
console.log('|---|--:|--:|--:|--:|--:|');
for (const [name, ms] of results) {
  const cpu = ms.map((m) => m.cpuUs);
  const tp = ms.map((m) => m.perSec);
  console.log(
    `| ${name} | ${median(tp).toFixed(0)} (${Math.min(...tp).toFixed(0)}–${Math.max(...tp).toFixed(0)}) | ` +
      `${median(cpu).toFixed(1)} (${Math.min(...cpu).toFixed(1)}–${Math.max(...cpu).toFixed(1)}) | ` +
      `${(median(cpu) / median(floor.map((m) => m.cpuUs))).toFixed(2)} × | ${median(ms.map((m) => m.statements)).toFixed(2)} | ` +
      `${median(ms.map((m) => m.wakeups)).toFixed(2)} |`,
  );
}
