/**
 * Steady-state hand-over, client side: W waiters in one process (each its own Locks, redis()
 * backend and ioredis client, as W services would have) pass one key round as fast as they can:
 * acquire → release → acquire, no critical section (or `--cs <ms>`). Every grant is a hand-over
 * from one waiter to the queue's head. Measured after a warm-up of as many grants (the code is
 * JIT-compiled, as in a service that has run for hours): grants/s and this process's CPU per grant
 * (process.cpuUsage: user + system), and Redis scripts per grant (EVALSHA and EVAL sent by its own clients, counted client-side).
 *
 * The floor: the same W in a ring, each on its own pair of connections, passing a turn with
 * `RPUSH` to the next one's `BLPOP` (no lock at all: the least a fair hand-over can cost).
 * Subjects alternate round by round in one process, so drift in machine load hits them alike.
 *
 *   npx tsx bench/handoff-local.ts [--rounds 3] [--waiters 3] [--grants 20000] [--cs 0]
 *                                  [--dist <dir> …]   (default: dist/; several: one row each)
 *
 * `--dist` compares builds side by side (e.g. one made from an older commit with tsup).
 */
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { countCommands } from './lib/clients.js';
import { dists as listDists, opt } from './lib/argv.js';

const dists = listDists();
const ROUNDS = opt('rounds', 3);
const W = opt('waiters', 3);
const N = opt('grants', 20_000);
const CS = opt('cs', 0);
const PORT = 6379;

interface Row {
  name: string;
  run(key: string, grants: () => void, stop: () => boolean): Promise<() => Promise<void>>;
}

const pause = () => (CS > 0 ? new Promise<void>((r) => setTimeout(r, CS)) : null);

async function leaseholdRow(dist: string): Promise<Row> {
  const { createLocks } = await import(pathToFileURL(`${dist}/index.js`).href);
  const { redis } = await import(pathToFileURL(`${dist}/backends/redis/index.js`).href);
  return {
    name: `leasehold (${dist.split('/').slice(-2).join('/')})`,
    async run(key, granted, stop) {
      const clients = Array.from({ length: W }, () => new Redis({ port: PORT }));
      // scripts counted on our clients: the shared server's INFO commandstats counts everyone's
      for (const c of clients) scriptCounters.push(countCommands(c, ['evalsha', 'eval']));
      const all = clients.map((c) => createLocks(redis(c), { ttl: 5_000, wait: 30_000 }));
      // each subscribes its channel and loads the scripts before the round
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
        for (const c of clients) c.disconnect();
      };
    },
  };
}

const floorRow: Row = {
  name: 'raw fair hand-off (floor): RPUSH to the next BLPOP',
  async run(key, granted, stop) {
    const pairs = Array.from({ length: W }, () => [new Redis({ port: PORT }), new Redis({ port: PORT })] as const);
    await pairs[0]![0].rpush(`${key}:turn:0`, '1');
    const loops = pairs.map(async ([c, blocking], i) => {
      while (!stop()) {
        if ((await blocking.blpop(`${key}:turn:${i}`, 1)) === null) continue;
        granted();
        await pause();
        await c.rpush(`${key}:turn:${(i + 1) % W}`, '1');
      }
    });
    return async () => {
      await Promise.all(loops);
      for (const [c, b] of pairs) {
        c.disconnect();
        b.disconnect();
      }
    };
  },
};

const scriptCounters: { readonly count: number }[] = [];
const scripts = () => scriptCounters.reduce((n, c) => n + c.count, 0);

async function measure(row: Row, admin: Redis, round: number, index: number) {
  // a key per row and round: a row's leftover queue places never delay the next row's start
  const key = `bench:handoff-local:${process.pid}:${round}:${index}`;
  let grants = 0;
  let stopped = false;
  const finish = await row.run(
    key,
    () => grants++,
    () => stopped,
  );
  const reach = (n: number) =>
    new Promise<void>((r) => {
      const t = setInterval(() => grants >= n && (clearInterval(t), r()), 2);
    });
  await reach(N); // warm-up: as many grants as the measured window
  const [g0, s0, c0, t0] = [grants, scripts(), process.cpuUsage(), performance.now()];
  await reach(g0 + N);
  const [g1, s1, c, t1] = [grants, scripts(), process.cpuUsage(c0), performance.now()];
  stopped = true;
  await finish();
  await admin.del(key, ...Array.from({ length: W }, (_, i) => `${key}:turn:${i}`));
  const g = g1 - g0;
  return {
    perSec: g / ((t1 - t0) / 1000),
    cpuUs: (c.user + c.system) / g,
    scripts: (s1 - s0) / g,
  };
}

const rows: Row[] = [...(await Promise.all(dists.map(leaseholdRow))), floorRow];
const admin = new Redis({ port: PORT });
const results = new Map<string, { perSec: number; cpuUs: number; scripts: number }[]>();
console.log(`${W} waiters in one process, one key, cs ${CS} ms; ${ROUNDS} rounds × ${N} grants (after ${N} warm-up)`);
for (let r = 0; r < ROUNDS; r++) {
  for (const [i, row] of rows.entries()) {
    const m = await measure(row, admin, r, i);
    (results.get(row.name) ?? results.set(row.name, []).get(row.name)!).push(m);
    console.log(
      `  round ${r + 1} ${row.name}: ${m.perSec.toFixed(0)} grants/s, ${m.cpuUs.toFixed(1)} µs CPU per grant`,
    );
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const floor = results.get(floorRow.name)!;
console.log(
  '\n| subject | grants/s (median) | client CPU µs per grant (median, best) | vs floor | Redis scripts per grant |',
);
console.log('|---|--:|--:|--:|--:|');
for (const [name, ms] of results) {
  const cpu = median(ms.map((m) => m.cpuUs));
  console.log(
    `| ${name} | ${median(ms.map((m) => m.perSec)).toFixed(0)} | ${cpu.toFixed(1)}, ${Math.min(...ms.map((m) => m.cpuUs)).toFixed(1)} | ` +
      `${(cpu / median(floor.map((m) => m.cpuUs))).toFixed(2)} × | ${name === floorRow.name ? '–' : median(ms.map((m) => m.scripts)).toFixed(2)} |`,
  );
}
admin.disconnect();
