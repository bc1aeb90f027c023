/**
 * Quick Redlock latency: one uncontended acquire + release, sequential, per subject, on the shared
 * nodes 7001..7005 (bash scripts/services.sh). Subjects are interleaved round by round so drift
 * in machine load hits them all alike.
 *
 *   npx tsx bench/redlock-quick.ts [rounds=2000]
 *
 * leasehold: the driver (backend.acquire + backend.release: what one attempt costs on the wire)
 * and the public path (locks.tryAcquire + lease.release, renew off). @sesamecare-oss/redlock:
 * acquire([key], ttl) + lock.release(), retryCount 0. Every subject has its own ioredis clients.
 * A last section freezes (SIGSTOP) one of 5 nodes, our own redis-server on 7401.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { Redlock } from '@sesamecare-oss/redlock';
import { Redis } from 'ioredis';
import type { Backend } from '../src/backend.js';
import { redis } from '../src/backends/redis/index.js';
import { redlock } from '../src/backends/redlock/index.js';
import { createLocks } from '../src/index.js';

const ROUNDS = Number(process.argv[2] ?? 2000);
const TTL = 30_000;
const PORTS = [7001, 7002, 7003, 7004, 7005];
const STALL_PORT = 7401;
const opened: Redis[] = [];

async function connect(ports: readonly number[], commandTimeout?: number): Promise<Redis[]> {
  const cs = ports.map((port) => {
    const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1, commandTimeout });
    c.on('error', () => {});
    return c;
  });
  await Promise.all(cs.map((c) => c.connect()));
  opened.push(...cs);
  return cs;
}

interface Subject {
  name: string;
  cycle(key: string): Promise<void>;
  close?(): Promise<void>;
}

function driver(name: string, b: Backend): Subject {
  return {
    name,
    async cycle(key) {
      const token = randomUUID() + randomUUID();
      if (!(await b.acquire(key, { token, ttlMs: TTL }))) throw new Error(`${name}: not granted`);
      await b.release(key, token);
    },
    close: () => b.close(),
  };
}

function locks(name: string, b: Backend): Subject {
  const l = createLocks(b, { ttl: TTL, renew: false, prefix: 'bench' });
  return {
    name,
    async cycle(key) {
      const lease = await l.tryAcquire(key);
      if (!lease) throw new Error(`${name}: not granted`);
      await lease.release();
    },
    close: () => l.close(),
  };
}

function sesamecare(name: string, clients: Redis[]): Subject {
  const r = new Redlock(clients as any, { retryCount: 0 });
  r.on('error', () => {});
  return {
    name,
    async cycle(key) {
      const lock = await r.acquire([key], TTL);
      await lock.release();
    },
  };
}

const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;

async function measure(subjects: Subject[], rounds: number) {
  const samples = subjects.map(() => [] as number[]);
  const keys = subjects.map(() => `bench-rl:${randomUUID().slice(0, 8)}`);
  for (let warm = 0; warm < 50; warm++) for (const [i, s] of subjects.entries()) await s.cycle(keys[i]!);
  for (let r = 0; r < rounds; r++) {
    for (let j = 0; j < subjects.length; j++) {
      const i = (j + r) % subjects.length; // rotate the order every round
      const t0 = performance.now();
      await subjects[i]!.cycle(keys[i]!);
      samples[i]!.push(performance.now() - t0);
    }
  }
  return subjects.map((s, i) => ({ name: s.name, p50: pct(samples[i]!, 0.5), p99: pct(samples[i]!, 0.99) }));
}

function print(title: string, rows: { name: string; p50: number; p99: number }[], base: number) {
  console.log(`\n${title}`);
  console.log('| subject | p50 ms | p99 ms | p50 vs single-node driver |');
  console.log('|---|---:|---:|---:|');
  for (const r of rows) {
    console.log(`| ${r.name} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${(r.p50 / base).toFixed(2)}× |`);
  }
}

async function stalled(rounds: number) {
  const proc = spawn('redis-server', ['--port', String(STALL_PORT), '--bind', '127.0.0.1', '--save', ''], {
    stdio: 'ignore',
  });
  try {
    for (let i = 0; i < 100; i++) {
      const probe = new Redis({ port: STALL_PORT, lazyConnect: true, maxRetriesPerRequest: 0 });
      probe.on('error', () => {});
      const ok = await probe.connect().then(
        () => true,
        () => false,
      );
      probe.disconnect();
      if (ok) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const ports = [...PORTS.slice(0, 4), STALL_PORT];
    // Every library gets the same 1s per-command timeout: sesamecare has none of its own.
    const ours = redlock(await connect(ports, 1000), { nodeTimeout: 1000 });
    const subjects = [driver('leasehold redlock() driver, 5 nodes, 1 frozen', ours)];
    subjects.push(sesamecare('@sesamecare-oss/redlock, 5 nodes, 1 frozen', await connect(ports, 1000)));
    proc.kill('SIGSTOP');
    const rows = await measure(subjects, rounds);
    print(`5 nodes, one SIGSTOPped (${rounds} rounds; ioredis commandTimeout 1000ms)`, rows, rows[0]!.p50);
    await ours.close();
  } finally {
    proc.kill('SIGKILL');
  }
}

async function main() {
  const single = redis((await connect(PORTS.slice(0, 1)))[0]!);
  const subjects: Subject[] = [
    driver('leasehold redis() driver, 1 node', single),
    driver('leasehold redlock() driver, 3 nodes', redlock(await connect(PORTS.slice(0, 3)))),
    driver('leasehold redlock() driver, 5 nodes', redlock(await connect(PORTS))),
    locks('leasehold redis() via tryAcquire/release, 1 node', redis((await connect(PORTS.slice(0, 1)))[0]!)),
    locks('leasehold redlock() via tryAcquire/release, 3 nodes', redlock(await connect(PORTS.slice(0, 3)))),
    locks('leasehold redlock() via tryAcquire/release, 5 nodes', redlock(await connect(PORTS))),
    sesamecare('@sesamecare-oss/redlock, 1 node', await connect(PORTS.slice(0, 1))),
    sesamecare('@sesamecare-oss/redlock, 3 nodes', await connect(PORTS.slice(0, 3))),
    sesamecare('@sesamecare-oss/redlock, 5 nodes', await connect(PORTS)),
  ];
  const rows = await measure(subjects, ROUNDS);
  print(`Uncontended acquire + release, sequential (${ROUNDS} rounds, interleaved)`, rows, rows[0]!.p50);
  for (const s of subjects) await s.close?.();
  await stalled(Math.min(ROUNDS, 20));
}

main()
  .catch((e) => {
    console.error(e);
    process.exitCode = 1;
  })
  .finally(() => opened.forEach((c) => c.disconnect()));
