/**
 * 4. One process holding `n` auto-renewed leases on a dedicated Redis (forked by
 * bench/sections/scale.ts with --expose-gc): one window of `windowMs`, or (spec.rounds, the session
 * comparison) one window per round when the parent asks. Reports renewal traffic (Redis-side
 * command counts and client-side round trips), client and Redis CPU and heap over IPC.
 */
import { Cluster, type Redis } from 'ioredis';
import { Mutex } from 'redis-semaphore';
import type { Lease } from '../src/index.js';
import { createLocks, redis } from './lib/leasehold.js';
import { startProfile } from './lib/profile.js';
import { ioredis, quit } from './lib/clients.js';
import { errText, median, now, round, sleep } from './lib/stats.js';
import type { ScaleResult, ScaleSpec, ScaleWindow } from './lib/scale-types.js';

export type { ScaleResult, ScaleSpec, ScaleWindow } from './lib/scale-types.js';

/** The services' Redis Cluster (scripts/services.d/cluster.sh); LEASEHOLD_CLUSTER_NODES moves it. */
const CLUSTER_NODES = (process.env.LEASEHOLD_CLUSTER_NODES ?? '127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303')
  .split(',')
  .map((hp) => ({ host: hp.split(':')[0]!, port: Number(hp.split(':')[1]) }));

/** leasehold on Redis Cluster: `n` leases under their own prefix, renewal round trips counted per node. */
async function runCluster(spec: ScaleSpec): Promise<ScaleResult> {
  const client = new Cluster(CLUSTER_NODES, { lazyConnect: true, redisOptions: { maxRetriesPerRequest: 1 } });
  client.on('error', () => {});
  await client.connect();
  const masters = () => client.nodes('master');
  const prefix = `lh-bench-${process.pid}-${Date.now()}`;
  const stats = async () => {
    const all = await Promise.all(masters().map((m) => info(m)));
    return { commands: all.reduce((a, x) => a + x.commands, 0), cpu: all.reduce((a, x) => a + x.cpu, 0) };
  };
  // a round trip is one pipeline or one script sent alone, on a master's own connection (the
  // per-node fast path) or through the cluster client (per-slot calls, resent after MOVED/ASK)
  let trips = 0;
  let items = 0;
  for (const who of [client, ...masters()] as any[]) {
    for (const m of ['pipeline', 'evalsha', 'eval']) {
      const orig = who[m];
      who[m] = (...a: unknown[]) => (trips++, orig.apply(who, a));
    }
  }
  const backend = redis(client);
  const extend = backend.extend.bind(backend);
  backend.extend = (batch) => ((items += batch.length), extend(batch));
  const locks = createLocks(backend, { ttl: spec.ttlMs, prefix });
  const renewEveryMs = Math.floor(spec.ttlMs / 3);
  gc();
  const heapBefore = process.memoryUsage().heapUsed;
  const t0 = now();
  const leases: Lease[] = new Array<Lease>(spec.n);
  // acquiring is not what is measured: fewer in flight than on one node, and a timed-out acquire
  // (a loaded machine) is tried again
  await pool(spec.n, 64, async (i) => {
    for (let attempt = 1; ; attempt++) {
      try {
        leases[i] = await locks.acquire(`scale:${i}`, { wait: 10_000 });
        return;
      } catch (e) {
        if (attempt >= 3) throw e;
      }
    }
  });
  const acquireAllMs = now() - t0;
  await sleep(renewEveryMs + 200);
  gc();
  const heapHeld = process.memoryUsage().heapUsed;
  const before = await stats();
  trips = 0;
  items = 0;
  const cpu0 = process.cpuUsage();
  const w0 = now();
  let heapPeak = 0;
  while (now() - w0 < spec.windowMs) {
    await sleep(Math.min(250, spec.windowMs - (now() - w0)));
    heapPeak = Math.max(heapPeak, process.memoryUsage().heapUsed);
  }
  const cpu = process.cpuUsage(cpu0);
  const windowMs = now() - w0;
  const after = await stats();
  const rt = trips;
  const renewed = items;
  const lost = leases.filter((l) => !l.held).length;
  const rss = process.memoryUsage().rss;
  const r0 = now();
  // not measured: 64 at a time, and a release that times out on a loaded machine is left to expire
  await pool(spec.n, 64, (i) =>
    leases[i]!.release().then(
      () => {},
      () => {},
    ),
  );
  await locks.close();
  const releaseAllMs = now() - r0;
  // the fence counters outlive the leases: the shared cluster gets its keys back
  for (const m of masters()) {
    let cursor = '0';
    do {
      const [next, keys] = await m.scan(cursor, 'MATCH', `{${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) await m.pipeline(keys.map((k) => ['unlink', k])).exec(); // one slot per command
    } while (cursor !== '0');
  }
  const nodes = masters().length;
  client.disconnect();
  const sec = windowMs / 1000;
  const ticks = windowMs / renewEveryMs;
  return {
    lib: spec.lib,
    n: spec.n,
    ...(spec.control ? { control: true } : {}),
    ttlMs: spec.ttlMs,
    renewEveryMs,
    acquireAllMs: Math.round(acquireAllMs),
    windowMs: Math.round(windowMs),
    // each master's closing INFO pair is 2 of its counted commands
    redisCommandsPerSec: Math.round((after.commands - before.commands - 2 * nodes) / sec),
    redisCpuPct: round(((after.cpu - before.cpu) / sec) * 100),
    roundTripsPerSec: round(rt / sec),
    roundTripsPerTick: round(rt / ticks / nodes),
    renewalsPerSec: Math.round(renewed / sec),
    clientCpuPct: round(((cpu.user + cpu.system) / 1000 / windowMs) * 100),
    heapBeforeMB: mb(heapBefore),
    heapHeldMB: mb(heapHeld),
    heapPeakMB: mb(heapPeak),
    rssMB: mb(rss),
    lost,
    releaseAllMs: Math.round(releaseAllMs),
    nodes,
  };
}

/** With LEASEHOLD_BENCH_PROFILE=<dir>, the measurement window (only) goes to <dir>/scale-<lib>.cpuprofile. */
const profiler = (lib: string) => startProfile(`scale-${lib}`);

const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
const mb = (b: number) => round(b / 1048576);

async function info(admin: Redis): Promise<{ commands: number; cpu: number; user: number; sys: number }> {
  const s = await admin.info('stats');
  const c = await admin.info('cpu');
  const commands = Number(/total_commands_processed:(\d+)/.exec(s)?.[1] ?? NaN);
  const user = Number(/used_cpu_user:([\d.]+)/.exec(c)?.[1] ?? NaN);
  const sys = Number(/used_cpu_sys:([\d.]+)/.exec(c)?.[1] ?? NaN);
  return { commands, cpu: user + sys, user, sys };
}

/** Runs `f(i)` for i in [0, n) with at most `width` in flight. */
async function pool(n: number, width: number, f: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, n) }, async () => {
      while (next < n) await f(next++);
    }),
  );
}

/** `n` leases held in this process, and what a window reads of them. */
interface Held {
  admin: Redis;
  client: Redis;
  counted: { calls: number; items: number };
  renewEveryMs: number;
  acquireAllMs: number;
  heapBefore: number;
  countLost: () => number;
  releaseAll: () => Promise<void>;
}

async function hold(spec: ScaleSpec): Promise<Held> {
  const admin = await ioredis(spec.port);
  const client = await ioredis(spec.port);
  await admin.flushall();
  const counted = { calls: 0, items: 0 };
  let lost = 0;
  let renewEveryMs: number;
  let releaseAll: () => Promise<void>;
  let countLost: () => number;
  gc();
  const heapBefore = process.memoryUsage().heapUsed;
  const t0 = now();
  if (spec.lib === 'leasehold' || spec.lib === 'leasehold-session') {
    const backend = redis(client, { session: spec.lib === 'leasehold-session' });
    const extend = backend.extend.bind(backend);
    backend.extend = (batch) => {
      counted.calls++;
      counted.items += batch.length;
      return extend(batch);
    };
    const renewSessions = backend.renewSessions?.bind(backend);
    // session mode: one pipeline per tick renews the session key (renewals/s counts sessions)
    if (renewSessions) {
      (backend as { renewSessions: typeof renewSessions }).renewSessions = (ids) => {
        counted.calls++;
        counted.items += ids.length;
        return renewSessions(ids);
      };
    }
    // the control: a TTL 20 × all its windows, renewed as the row's leases are (so the heap holds
    // the same renewal entries: a group per session, a binding per lease) but first after 20/3 of
    // them, so nothing is sent during any window (its "renewal period" is the row's). Not
    // `renew: false`: such leases hang off no session, and a smaller heap at rest made the row
    // minus its control count the keeper's per-lease entries (11.5 MB at 100,000) as renewal's cost
    const locks = spec.control
      ? createLocks(backend, { ttl: spec.windowMs * (spec.rounds ?? 1) * 20 })
      : createLocks(backend, { ttl: spec.ttlMs });
    renewEveryMs = Math.floor(spec.ttlMs / 3);
    const leases: Lease[] = new Array<Lease>(spec.n);
    await pool(spec.n, 256, async (i) => {
      leases[i] = await locks.acquire(`scale:${i}`, { wait: 10_000 });
    });
    countLost = () => leases.filter((l) => !l.held).length;
    releaseAll = async () => {
      // not measured: 256 at a time (100,000 at once would outwait opTimeout on a loaded machine)
      await pool(spec.n, 256, (i) => leases[i]!.release().then(() => {}));
      await locks.close();
    };
  } else {
    // redis-semaphore refreshes each mutex with its own setInterval (0.8 × lockTimeout)
    const evalsha = client.evalsha.bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as any).evalsha = (...a: unknown[]) => {
      counted.calls++;
      counted.items++;
      return evalsha(...a);
    };
    renewEveryMs = Math.round(spec.ttlMs * 0.8);
    const mutexes: Mutex[] = new Array<Mutex>(spec.n);
    await pool(spec.n, 256, async (i) => {
      const m = new Mutex(client, `scale:${i}`, { lockTimeout: spec.ttlMs, onLockLost: () => void lost++ });
      await m.acquire();
      mutexes[i] = m;
    });
    countLost = () => lost + mutexes.filter((m) => !m.isAcquired).length;
    releaseAll = async () => {
      await Promise.all(mutexes.map((m) => m.release()));
    };
  }
  const acquireAllMs = now() - t0;
  // steady state: every lease has been renewed at least once before a window opens
  await sleep(renewEveryMs + 200);
  gc(); // once, after the acquisition burst: never again between windows (GC is part of the cost)
  return { admin, client, counted, renewEveryMs, acquireAllMs, heapBefore, countLost, releaseAll };
}

/** One measured window of `ms` over leases already held. */
async function measure(h: Held, ms: number): Promise<ScaleWindow> {
  const before = await info(h.admin);
  h.counted.calls = 0;
  h.counted.items = 0;
  const cpu0 = process.cpuUsage();
  const w0 = now();
  let heapPeak = 0;
  while (now() - w0 < ms) {
    await sleep(Math.min(250, ms - (now() - w0)));
    heapPeak = Math.max(heapPeak, process.memoryUsage().heapUsed);
  }
  const cpu = process.cpuUsage(cpu0);
  const windowMs = now() - w0;
  const after = await info(h.admin);
  const sec = windowMs / 1000;
  const pct = (us: number) => round((us / 1000 / windowMs) * 100);
  const redisPct = (s: number) => round((s / sec) * 100);
  return {
    windowMs: Math.round(windowMs),
    // the closing INFO pair itself is 2 of the counted commands
    redisCommandsPerSec: Math.round((after.commands - before.commands - 2) / sec),
    redisCpuPct: redisPct(after.cpu - before.cpu),
    redisUserPct: redisPct(after.user - before.user),
    redisSysPct: redisPct(after.sys - before.sys),
    roundTripsPerSec: round(h.counted.calls / sec),
    roundTripsPerTick: round(h.counted.calls / (windowMs / h.renewEveryMs)),
    renewalsPerSec: Math.round(h.counted.items / sec),
    clientCpuPct: pct(cpu.user + cpu.system),
    userCpuPct: pct(cpu.user),
    sysCpuPct: pct(cpu.system),
    heapPeakMB: mb(heapPeak),
    lost: h.countLost(),
  };
}

/** Ends the leases (not measured) and makes the row: its one window, or the median of its rounds. */
async function finish(spec: ScaleSpec, h: Held, heapHeld: number, windows: ScaleWindow[]): Promise<ScaleResult> {
  const rss = process.memoryUsage().rss;
  const r0 = now();
  await h.releaseAll();
  const releaseAllMs = now() - r0;
  await quit(h.client);
  await quit(h.admin);
  const med = (f: (w: ScaleWindow) => number) => round(median(windows.map(f)));
  return {
    lib: spec.lib,
    n: spec.n,
    ...(spec.control ? { control: true } : {}),
    ttlMs: spec.ttlMs,
    renewEveryMs: h.renewEveryMs,
    acquireAllMs: Math.round(h.acquireAllMs),
    windowMs: windows.length === 1 ? windows[0]!.windowMs : Math.round(med((w) => w.windowMs)),
    redisCommandsPerSec: Math.round(med((w) => w.redisCommandsPerSec)),
    redisCpuPct: med((w) => w.redisCpuPct),
    roundTripsPerSec: med((w) => w.roundTripsPerSec),
    roundTripsPerTick: med((w) => w.roundTripsPerTick),
    renewalsPerSec: Math.round(med((w) => w.renewalsPerSec)),
    clientCpuPct: med((w) => w.clientCpuPct),
    userCpuPct: med((w) => w.userCpuPct),
    sysCpuPct: med((w) => w.sysCpuPct),
    heapBeforeMB: mb(h.heapBefore),
    heapHeldMB: mb(heapHeld),
    heapPeakMB: Math.max(...windows.map((w) => w.heapPeakMB)),
    rssMB: mb(rss),
    lost: Math.max(...windows.map((w) => w.lost)),
    releaseAllMs: Math.round(releaseAllMs),
    ...(windows.length > 1 ? { rounds: windows } : {}),
  };
}

/** One window per child (the per-lease rows, redis-semaphore): acquire, settle, measure, release. */
async function run(spec: ScaleSpec): Promise<ScaleResult> {
  if (spec.lib === 'leasehold-cluster') return runCluster(spec);
  const h = await hold(spec);
  const heapHeld = process.memoryUsage().heapUsed;
  const stopProfile = await profiler(spec.lib);
  const w = await measure(h, spec.windowMs);
  await stopProfile();
  return finish(spec, h, heapHeld, [w]);
}

/**
 * Rounds (spec.rounds): the parent (bench/sections/scale-session.ts) sends { window: ms } once per
 * round, to every child of the comparison at once, and { finish: true } after the last; a window
 * with `warmup` is measured and reported, but is not one of the row's rounds.
 */
let rounds: { spec: ScaleSpec; held: Held; heapHeld: number; windows: ScaleWindow[] } | null = null;
const fail = (e: unknown) => process.send?.({ ok: false, error: errText(e) });

process.on('message', (m: ScaleSpec | { window: number; warmup?: true } | { finish: true }) => {
  if ('lib' in m && m.rounds) {
    const spec = m;
    hold(spec).then((held) => {
      const heapHeld = process.memoryUsage().heapUsed;
      rounds = { spec, held, heapHeld, windows: [] };
      process.send?.({ ready: true });
    }, fail);
  } else if ('lib' in m) {
    run(m).then((r) => process.send?.({ ok: true, result: r }), fail);
  } else if ('window' in m && rounds) {
    const r = rounds;
    measure(r.held, m.window).then((w) => {
      if (!m.warmup) r.windows.push(w);
      process.send?.({ window: w });
    }, fail);
  } else if ('finish' in m && rounds) {
    const r = rounds;
    finish(r.spec, r.held, r.heapHeld, r.windows).then((res) => process.send?.({ ok: true, result: res }), fail);
  }
});
process.on('disconnect', () => process.exit(0));
