/**
 * How long each call takes to settle while Redis does not answer (issue #9):
 * `npx tsx bench/bounds.ts [--runs=5]`
 *
 * A private redis-server (a free port asked of the OS) is frozen with SIGSTOP; with ioredis on
 * its defaults, ioredis with `maxRetriesPerRequest: null` and node-redis, it times
 * `acquire({ wait: 300 })`, `acquire({ signal: AbortSignal.timeout(200) })`, `tryAcquire()`,
 * `lease.extend()` and `locks.close()` under `opTimeout: 1000`, and prints the median and the
 * maximum of each over the runs. Reported, never asserted (the assertions are in
 * test/redis/freeze.test.ts).
 */
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { redis } from '../src/backends/redis/index.js';
import { createLocks } from '../src/index.js';
import { installCleanup, RedisServer, runCleanup } from './lib/procs.js';

const OP = 1000;
const runs = Number(process.argv.find((a) => a.startsWith('--runs='))?.slice('--runs='.length) ?? 5);

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

type Config = 'ioredis (defaults)' | 'ioredis (maxRetriesPerRequest: null)' | 'node-redis (defaults)';
const CONFIGS: Config[] = ['ioredis (defaults)', 'ioredis (maxRetriesPerRequest: null)', 'node-redis (defaults)'];

async function client(config: Config, port: number): Promise<{ c: any; drop: () => void }> {
  if (config === 'node-redis (defaults)') {
    const c = createClient({ socket: { host: '127.0.0.1', port } });
    c.on('error', () => {});
    await c.connect();
    return { c, drop: () => c.destroy() };
  }
  const extra = config === 'ioredis (defaults)' ? {} : { maxRetriesPerRequest: null };
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, ...extra });
  c.on('error', () => {});
  await c.connect();
  return { c, drop: () => c.disconnect() };
}

const settle = async (p: Promise<unknown>): Promise<number> => {
  const t0 = performance.now();
  await p.catch(() => {});
  return performance.now() - t0;
};

const CALLS = ['acquire wait 300', 'acquire signal 200', 'tryAcquire', 'extend', 'close()'] as const;

async function once(config: Config, server: RedisServer, port: number): Promise<number[]> {
  const { c, drop } = await client(config, port);
  const locks = createLocks(redis(c), { prefix: `bounds-${Math.random()}`, opTimeout: OP, ttl: '10s' });
  const lease = await locks.acquire('held');
  server.pause();
  try {
    const times = await Promise.all([
      settle(locks.acquire('w', { wait: 300 })),
      settle(locks.acquire('s', { signal: AbortSignal.timeout(200) })),
      settle(locks.tryAcquire('t')),
      settle(lease.extend()),
    ]);
    times.push(await settle(locks.close()));
    return times;
  } finally {
    server.resume();
    drop();
  }
}

installCleanup();
const port = await freePort();
const server = new RedisServer(port);
await server.start();
try {
  console.log(`settle time while Redis is frozen (SIGSTOP), opTimeout ${OP} ms, ${runs} runs: median / max (ms)\n`);
  console.log(`| client | ${CALLS.join(' | ')} |`);
  console.log(`|---|${CALLS.map(() => '---').join('|')}|`);
  for (const config of CONFIGS) {
    const all: number[][] = CALLS.map(() => []);
    for (let r = 0; r < runs; r++) (await once(config, server, port)).forEach((t, i) => all[i]!.push(t));
    const cells = all.map((xs) => {
      const s = [...xs].sort((a, b) => a - b);
      return `${Math.round(s[Math.floor(s.length / 2)]!)} / ${Math.round(s[s.length - 1]!)}`;
    });
    console.log(`| ${config} | ${cells.join(' | ')} |`);
  }
} finally {
  await server.stop();
  await runCleanup();
}
