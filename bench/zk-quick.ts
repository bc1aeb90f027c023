/**
 * Quick ZooKeeper handoff numbers in one process (run: `npx tsx bench/zk-quick.ts [grants]`): 8
 * contenders, each its own backend and session on 127.0.0.1:2181, one key, 1 ms critical
 * section. The 8-process version is section 2 of bench/run.ts; this one needs no forks, so it
 * still measures on a machine too loaded to start 8 tsx workers in time.
 */
import { connectZookeeper } from '../src/backends/zookeeper/index.js';
import { createLocks } from '../src/index.js';

const GRANTS = Number(process.argv[2] ?? 400);
const WORKERS = 8;
const key = `bench-zk-quick-${process.pid}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (s: number[], p: number) => s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;

const all = await Promise.all(
  Array.from({ length: WORKERS }, async () =>
    createLocks(
      await connectZookeeper(process.env.LEASEHOLD_ZK_HOSTS ?? '127.0.0.1:2181', { sessionTimeout: 10_000 }),
      {
        ttl: '10s',
        wait: '60s',
      },
    ),
  ),
);
for (const l of all) for (let i = 0; i < 10; i++) await (await l.acquire(`${key}:warm`)).release();
const waits: number[] = [];
const handoffs: number[] = [];
let left = GRANTS;
let releasedAt = 0;
const t0 = performance.now();
await Promise.all(
  all.map(async (l) => {
    while (left > 0) {
      const a = performance.now();
      const lease = await l.acquire(key);
      const b = performance.now();
      if (left <= 0) {
        await lease.release();
        break;
      }
      left--;
      waits.push(b - a);
      if (releasedAt) handoffs.push(b - releasedAt);
      await sleep(1);
      releasedAt = performance.now();
      await lease.release();
    }
  }),
);
const secs = (performance.now() - t0) / 1000;
waits.sort((x, y) => x - y);
handoffs.sort((x, y) => x - y);
const f = (x: number) => x.toFixed(2);
console.log(
  `${WORKERS} sessions, ${GRANTS} grants, cs 1 ms: ${Math.round(GRANTS / secs)} grants/s; ` +
    `handoff (release → next grant) p50 ${f(pct(handoffs, 50))} ms, p99 ${f(pct(handoffs, 99))} ms, max ${f(handoffs.at(-1)!)} ms; ` +
    `wait p50 ${f(pct(waits, 50))} ms, p99 ${f(pct(waits, 99))} ms, max ${f(waits.at(-1)!)} ms`,
);
await Promise.all(all.map((l) => l.close()));
