/**
 * A contended-handoff worker process (forked by bench/run.ts through tsx). It owns its own
 * connection(s) and runs: acquire → critical section (sleep csMs) → release, `count` times on one
 * key, timing each acquire's wait with performance.now() and reporting the samples over IPC.
 *
 * Protocol: parent → {type:'setup', spec} → 'ready' | 'failed'; {type:'go'} → 'done' (result);
 * {type:'teardown'} → 'closed'. The worker exits when the parent disconnects.
 */
import { readFileSync } from 'node:fs';
import { etcd, redis, redlockModule, sqlite } from './lib/leasehold.js';
import { etcdClient, ioredis, loadPostgres, pgClient, pgPool, quit } from './lib/clients.js';
import { startProfile } from './lib/profile.js';
import { SHARED } from './sections/redlock.js';
import { CONTENDED_POOL_MAX } from './sections/postgres.js';
import { epochNow, errText, now, sleep } from './lib/stats.js';
import {
  BudgetSpent,
  fairFloorSubject,
  leaseholdSubject,
  pgRawSubject,
  semaphoreMutexSubject,
  sesamecareSubject,
  sqliteRawSubject,
  type Subject,
} from './lib/subjects.js';

export type WorkerLib =
  | 'leasehold'
  | 'sesamecare'
  | 'semaphore'
  | 'pg-raw'
  | 'leasehold-pg'
  | 'leasehold-sqlite'
  | 'sqlite-raw'
  | 'leasehold-zk'
  | 'leasehold-etcd'
  | 'leasehold-redlock'
  | 'sesamecare-5'
  | 'fair-raw';

export interface WorkerSpec {
  lib: WorkerLib;
  index: number;
  key: string;
  count: number;
  csMs: number;
  /** The worker stops (and says so) when a run takes longer than this. */
  deadlineMs: number;
  ttlMs: number;
  waitMs: number;
  redisPort: number;
  /** How many workers share the key (the fair floor passes its turn round-robin). */
  workers: number;
  /** The SQLite libraries: the database file (one per run). */
  sqlitePath?: string;
}

export interface WorkerResult {
  index: number;
  /** ms from calling acquire until it resolved, one per grant */
  waits: number[];
  /** epoch ms (performance.timeOrigin + now) of each grant, to order grants across workers */
  grantsAt: number[];
  /** epoch ms at which each grant's release was called (its critical section over), one per grant */
  releasedAt: number[];
  meanHoldMs: number;
  startAt: number;
  endAt: number;
  errors: number;
  lastError?: string;
  incomplete: boolean;
  /** this process's CPU time (user + system) during the run, ms */
  cpuMs: number;
  /** commands this process sent to Redis during the run (ioredis sendCommand; null for Postgres) */
  commands: number | null;
  /**
   * Times this process's main thread went to sleep and was woken during the run (its voluntary
   * context switches in /proc/self/status; null off Linux): each wake-up costs a context switch and cold caches, which on a
   * loaded 2-core host weighs more than most of the JavaScript run per grant.
   */
  wakeups: number | null;
}

export type ToWorker = { type: 'setup'; spec: WorkerSpec } | { type: 'go' } | { type: 'teardown' };
export type FromWorker =
  { type: 'ready' } | { type: 'failed'; error: string } | { type: 'done'; result: WorkerResult } | { type: 'closed' };

let spec: WorkerSpec | null = null;
let commands: number | null = null;
let subject: Subject | null = null;
const closers: Array<() => Promise<unknown>> = [];

// the parent may already have given up on this worker and closed the channel: a late message is
// dropped (the callback receives the EPIPE instead of an 'error' event that would crash the worker)
const send = (m: FromWorker) => {
  if (process.connected) process.send?.(m, undefined, undefined, () => {});
};

/** The main thread's voluntary context switches so far (Linux), or null. */
function voluntarySwitches(): number | null {
  try {
    const m = /^voluntary_ctxt_switches:\s+(\d+)$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** Counts every command sent on `c` into `commands`. */
function counted(c: Awaited<ReturnType<typeof ioredis>>): void {
  const send = c.sendCommand.bind(c);
  commands = 0;
  c.sendCommand = ((...a: Parameters<typeof send>) => {
    if (commands !== null) commands++;
    return send(...a);
  }) as typeof c.sendCommand;
}

/** The fair floor's first turn on a key (worker 0 pushes it), kept for a round on the same subject. */
let firstTurn: ((key: string) => Promise<unknown>) | null = null;

async function setup(s: WorkerSpec): Promise<void> {
  if (subject && spec && spec.lib === s.lib && spec.index === s.index) {
    // the round after the warm-up: the same subject (its connections open, its code warm, as in
    // a service that has been waiting for hours), only the key and the count change
    spec = s;
    if (s.lib === 'fair-raw' && s.index === 0) await firstTurn!(s.key);
    return;
  }
  if (subject) await teardown();
  spec = s;
  const times = { ttlMs: s.ttlMs, waitMs: s.waitMs };
  switch (s.lib) {
    case 'leasehold':
    case 'sesamecare':
    case 'semaphore':
    case 'fair-raw': {
      const c = await ioredis(s.redisPort);
      closers.push(() => quit(c));
      // count every command sent on this connection (the subscriber connection only receives)
      counted(c);
      if (s.lib === 'fair-raw') {
        const blocking = await ioredis(s.redisPort);
        closers.push(async () => blocking.disconnect());
        counted(blocking);
        firstTurn = (key) => c.rpush(`${key}:turn:0`, '1');
        if (s.index === 0) await firstTurn(s.key); // the first turn is worker 0's
        subject = fairFloorSubject(c, blocking, s.index, s.workers, s.waitMs);
      } else
        subject =
          s.lib === 'leasehold'
            ? leaseholdSubject('leasehold', redis(c), times)
            : s.lib === 'sesamecare'
              ? sesamecareSubject('sesamecare', [c], times, true)
              : semaphoreMutexSubject('semaphore', c, times);
      break;
    }
    case 'leasehold-redlock':
    case 'sesamecare-5': {
      // five independent masters (the shared nodes of section 3), one connection to each
      const cs = await Promise.all(SHARED.map((p) => ioredis(p)));
      closers.push(() => Promise.all(cs.map((c) => quit(c))));
      for (const c of cs) counted(c); // commands: all five connections' (counted resets once, at setup)
      subject =
        s.lib === 'leasehold-redlock'
          ? leaseholdSubject('leasehold-redlock', (await redlockModule()).redlock(cs), times)
          : sesamecareSubject('sesamecare-5', cs, times, true);
      break;
    }
    case 'pg-raw': {
      const c = await pgClient();
      closers.push(() => c.end());
      subject = pgRawSubject(c, 'block');
      break;
    }
    case 'leasehold-sqlite':
      subject = leaseholdSubject('leasehold-sqlite', sqlite(s.sqlitePath!), times);
      break;
    case 'sqlite-raw':
      subject = sqliteRawSubject(s.sqlitePath!);
      break;
    case 'leasehold-zk': {
      const { zkBackend } = await import('./sections/zookeeper.js');
      subject = leaseholdSubject('leasehold-zk', await zkBackend(), times);
      break;
    }
    case 'leasehold-etcd': {
      const c = await etcdClient();
      closers.push(async () => c.close());
      subject = leaseholdSubject('leasehold-etcd', etcd(c), times);
      break;
    }
    case 'leasehold-pg': {
      const opt = await loadPostgres();
      if (!opt.ready) throw new Error(opt.reason);
      const pool = pgPool(CONTENDED_POOL_MAX);
      closers.push(() => pool.end());
      subject = leaseholdSubject('leasehold-pg', opt.factory(pool), times);
      break;
    }
  }
  const s2 = subject!;
  closers.push(() => s2.close());
  // warm-up on a private key: scripts loaded, connections open, JIT past the first call (the
  // fair floor's turns form a ring: it warms up on its connections' round trips only)
  if (s.lib !== 'fair-raw') for (let i = 0; i < 20; i++) await (await s2.acquire(`${s.key}:warm:${s.index}`)).release();
}

/**
 * With LEASEHOLD_BENCH_PROFILE=<dir>, each round's measurement window (only: not the process's
 * start-up, which dwarfs it) is CPU-profiled into <dir>/<lib>/<pid>-<round>.cpuprofile; round 0
 * is the warm-up round of a full run.
 */
let rounds = 0;
async function profiled<T>(f: () => Promise<T>): Promise<T> {
  const stop = await startProfile(`${spec!.lib}/${process.pid}-${rounds++}`);
  try {
    return await f();
  } finally {
    await stop();
  }
}

async function go(): Promise<WorkerResult> {
  const s = spec!;
  const subj = subject!;
  const waits: number[] = [];
  const grantsAt: number[] = [];
  const releasedAt: number[] = [];
  let held = 0;
  let errors = 0;
  let lastError: string | undefined;
  if (commands !== null) commands = 0;
  const switches0 = voluntarySwitches();
  const cpu0 = process.cpuUsage();
  const startAt = epochNow();
  const t0 = now();
  let incomplete = false;
  while (waits.length < s.count) {
    if (now() - t0 > s.deadlineMs || errors > 20) {
      incomplete = true;
      break;
    }
    const a = now();
    let h;
    try {
      h = await subj.acquire(s.key, s.deadlineMs - (now() - t0));
    } catch (e) {
      if (e instanceof BudgetSpent || now() - t0 > s.deadlineMs) {
        incomplete = true; // gave up at the deadline: not an error of the library
        lastError = errText(e instanceof BudgetSpent ? e.cause : e); // but say what it saw last
        break;
      }
      errors++;
      lastError = errText(e);
      continue;
    }
    const b = now();
    waits.push(b - a);
    grantsAt.push(performance.timeOrigin + b);
    await sleep(s.csMs);
    const c = now();
    held += c - b;
    releasedAt.push(performance.timeOrigin + c);
    try {
      await h.release();
    } catch (e) {
      errors++;
      lastError = errText(e);
    }
  }
  const cpu = process.cpuUsage(cpu0);
  const switches1 = voluntarySwitches();
  const r: WorkerResult = {
    cpuMs: (cpu.user + cpu.system) / 1000,
    commands,
    wakeups: switches0 === null || switches1 === null ? null : switches1 - switches0,
    index: s.index,
    waits,
    grantsAt,
    releasedAt,
    meanHoldMs: waits.length ? held / waits.length : 0,
    startAt,
    endAt: epochNow(),
    errors,
    incomplete,
  };
  if (lastError) r.lastError = lastError;
  return r;
}

async function teardown(): Promise<void> {
  for (const c of closers.splice(0).reverse()) await Promise.race([c().catch(() => {}), sleep(2000)]);
  subject = null;
  spec = null;
  commands = null;
}

process.on('message', (m: ToWorker) => {
  if (m.type === 'setup') {
    setup(m.spec).then(
      () => send({ type: 'ready' }),
      (e: unknown) => send({ type: 'failed', error: errText(e) }),
    );
  } else if (m.type === 'go') {
    profiled(go).then(
      (result) => send({ type: 'done', result }),
      (e: unknown) => send({ type: 'failed', error: errText(e) }),
    );
  } else if (m.type === 'teardown') {
    void teardown().then(() => send({ type: 'closed' }));
  }
});
process.on('disconnect', () => {
  void teardown().finally(() => process.exit(0));
});
