/**
 * Uncontended acquire+release, paired (issue #16, P1): builds of leasehold side by side with the
 * raw floor, in one process, subject after subject within each round (the machine is shared:
 * only alternating comparisons mean anything). Each subject has its own connection.
 *
 *   npx tsx bench/uncontended-paired.ts [--rounds 7] [--ms 400] [--keys 64] [--dist <dir> …]
 *
 * Sequential: one key, one caller; p50 of acquire+release, and ops/s. Parallel: `--keys` callers,
 * one key each, ops/s. Floors: raw ioredis SET NX PX + EVALSHA compare-and-delete (the bench's,
 * bench/lib/subjects.ts), on a plain client sequentially and on an `enableAutoPipelining` one with
 * many keys; raw node-redis the same. Printed per subject: median (min–max) over rounds of the
 * per-round ratio to that round's floor of the same client.
 */
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { args, dists as listDists, opt } from './lib/argv.js';

const dists = listDists();
const ROUNDS = opt('rounds', 7);
const MS = opt('ms', 400);
const KEYS = opt('keys', 64);
const only = args.includes('--node-redis-only') ? 'node-redis' : args.includes('--ioredis-only') ? 'ioredis' : null;
const PORT = opt('port', 6379);
const CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

interface Subject {
  name: string;
  kind: 'ioredis' | 'node-redis';
  floor: boolean;
  op(key: string): Promise<unknown>;
  close(): Promise<void>;
}

async function ioFloor(batched: boolean): Promise<Subject> {
  const c = new Redis({ port: PORT, enableAutoPipelining: batched });
  c.defineCommand('cad', { numberOfKeys: 1, lua: CAD });
  const cad = (c as any).cad.bind(c) as (k: string, t: string) => Promise<number>;
  return {
    name: batched ? 'raw ioredis autopipelined' : 'raw ioredis',
    kind: 'ioredis',
    floor: true,
    async op(key) {
      const token = randomBytes(16).toString('base64url');
      if ((await c.set(key, token, 'PX', 30_000, 'NX')) !== 'OK') throw new Error('held');
      await cad(key, token);
    },
    close: async () => void c.disconnect(),
  };
}

async function nrFloor(): Promise<Subject> {
  const c = createClient({ socket: { port: PORT } });
  await c.connect();
  const sha = String(await c.sendCommand(['SCRIPT', 'LOAD', CAD]));
  return {
    name: 'raw node-redis',
    kind: 'node-redis',
    floor: true,
    async op(key) {
      const token = randomBytes(16).toString('base64url');
      if (String(await c.sendCommand(['SET', key, token, 'PX', '30000', 'NX'])) !== 'OK') throw new Error('held');
      await c.sendCommand(['EVALSHA', sha, '1', key, token]);
    },
    close: async () => void (await c.quit()),
  };
}

async function ours(dist: string, kind: 'ioredis' | 'node-redis'): Promise<Subject> {
  const { createLocks } = await import(pathToFileURL(`${dist}/index.js`).href);
  const { redis } = await import(pathToFileURL(`${dist}/backends/redis/index.js`).href);
  let client: any;
  if (kind === 'ioredis') client = new Redis({ port: PORT });
  else {
    client = createClient({ socket: { port: PORT } });
    await client.connect();
  }
  const locks = createLocks(redis(client), { ttl: 30_000, wait: 5_000 });
  return {
    name: `${dist.split('/').slice(-2).join('/')} ${kind}`,
    kind,
    floor: false,
    async op(key) {
      const lease = await locks.acquire(key);
      await lease.release();
    },
    close: async () => {
      await locks.close();
      if (kind === 'ioredis') client.disconnect();
      else await client.quit();
    },
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

interface Sample {
  ops: number;
  p50: number;
  /** this process's CPU (user + system) per op, µs */
  cpu: number;
  /** redis-server's CPU per op (INFO cpu: user + system), µs: only meaningful on a server of one's own */
  server: number;
}

const statsClient = new Redis({ port: PORT });
async function serverUsec(): Promise<number> {
  const info = await statsClient.info('cpu');
  const sec = (k: string) => Number(new RegExp(`^${k}:([\\d.]+)`, 'm').exec(info)?.[1] ?? 0);
  return (sec('used_cpu_user') + sec('used_cpu_sys')) * 1e6;
}

/** One caller per key for MS ms: ops/s, and the p50 of one op (ms). */
async function measure(s: Subject, keys: string[]): Promise<Sample> {
  const lat: number[] = [];
  const u0 = await serverUsec();
  const c0 = process.cpuUsage();
  const end = performance.now() + MS;
  await Promise.all(
    keys.map(async (k) => {
      while (performance.now() < end) {
        const t = performance.now();
        await s.op(k);
        lat.push(performance.now() - t);
      }
    }),
  );
  const c = process.cpuUsage(c0);
  const u1 = await serverUsec();
  return {
    ops: lat.length / (MS / 1000),
    p50: median(lat),
    cpu: (c.user + c.system) / lat.length,
    server: (u1 - u0) / lat.length,
  };
}

const run = randomBytes(4).toString('hex');
const subjects: Subject[] = [];
const parallelFloor = only === 'node-redis' ? null : await ioFloor(true);
if (only !== 'node-redis') subjects.push(await ioFloor(false));
if (only !== 'ioredis') subjects.push(await nrFloor());
for (const d of dists) {
  if (only !== 'node-redis') subjects.push(await ours(d, 'ioredis'));
  if (only !== 'ioredis') subjects.push(await ours(d, 'node-redis'));
}
const keysOf = (s: Subject, n: number) =>
  Array.from({ length: n }, (_, i) => `bench:p1:${run}:${s.name.replace(/\W+/g, '-')}:${n}:${i}`);

for (const mode of ['sequential', `${KEYS} keys`] as const) {
  const seq = mode === 'sequential';
  const all = seq ? subjects : [...(parallelFloor ? [parallelFloor] : []), ...subjects];
  // warm-up: JIT, scripts loaded, subscriptions made
  for (const s of all) await measure(s, keysOf(s, seq ? 1 : KEYS));
  const per = new Map<Subject, Sample[]>(all.map((s) => [s, []]));
  for (let r = 0; r < ROUNDS; r++) {
    // a different order each round: no subject always follows the same one
    const order = r % 2 ? [...all].reverse() : all;
    for (const s of order) per.get(s)!.push(await measure(s, keysOf(s, seq ? 1 : KEYS)));
  }
  const floorOf = (s: Subject) =>
    seq || s.kind === 'node-redis' || !parallelFloor
      ? all.find((f) => f.floor && f.kind === s.kind && f !== parallelFloor)!
      : parallelFloor;
  console.log(`\n## ${mode}: ${ROUNDS} rounds × ${MS} ms; ratio = per-round time per op / floor's (median, min–max)`);
  for (const s of all) {
    const rs = per.get(s)!;
    const f = per.get(floorOf(s))!;
    const ratios = rs.map((x, i) => (seq ? x.p50 / f[i]!.p50 : f[i]!.ops / x.ops));
    const fmt = (x: number) => x.toFixed(3);
    console.log(
      `${s.name.padEnd(44)} ops/s ${median(rs.map((x) => x.ops))
        .toFixed(0)
        .padStart(6)}  p50 ${fmt(median(rs.map((x) => x.p50)))} ms  ` +
        `vs ${floorOf(s).name}: ${fmt(median(ratios))} (${fmt(Math.min(...ratios))}–${fmt(Math.max(...ratios))})  ` +
        `cpu ${median(rs.map((x) => x.cpu)).toFixed(1)} µs/op  redis ${median(rs.map((x) => x.server)).toFixed(1)} µs/op`,
    );
  }
}
await Promise.all([...subjects, ...(parallelFloor ? [parallelFloor] : [])].map((s) => s.close()));
const admin = new Redis({ port: PORT });
let cursor = '0';
do {
  const [next, found] = await admin.scan(cursor, 'MATCH', `*bench:p1:${run}:*`, 'COUNT', 1000);
  cursor = next;
  if (found.length) await admin.del(...found);
} while (cursor !== '0');
admin.disconnect();
statsClient.disconnect();
