/**
 * leasehold benchmark harness: `npx tsx bench/run.ts [--quick] [--only=uncontended,contended,redlock,scale,postgres,zookeeper,etcd]`
 *
 * Measures, in one invocation on the local servers, leasehold against the raw floor and the
 * peer libraries, and writes bench/results/<date>-<host>.{json,md} and contended-wait.svg
 * (a --quick run writes <date>-<host>-quick.* and contended-wait-quick.svg instead, so a smoke
 * run never overwrites a full one). Speed is reported, never asserted: the exit code is 0 when
 * every section ran, 1 when a section could not run (services down, harness broken).
 * Method and settings: docs/benchmarks.md.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, hostname, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { ioredis, pgClient, quit } from './lib/clients.js';
import type { Ctx } from './lib/ctx.js';
import { SOURCE_LABEL } from './lib/leasehold.js';
import { installCleanup, ping, runCleanup } from './lib/procs.js';
import { runSection } from './lib/scope.js';
import { errText, now } from './lib/stats.js';
import { goals, subjectErrors } from './report/goals.js';
import { markdown } from './report/markdown.js';
import { waitChart } from './report/svg.js';
import type { Meta, Results } from './report/types.js';
import { closeQuickPool, contended, contendedOptions, type ContendedPlan } from './sections/contended.js';
import { etcdReady, etcdSection } from './sections/etcd.js';
import { CONTENDED_POOL_MAX, POOL_MAX, postgresReady, postgresSection, purgePostgres } from './sections/postgres.js';
import { redlockSection, SHARED } from './sections/redlock.js';
import { scale } from './sections/scale.js';
import { uncontended } from './sections/uncontended.js';
import { zookeeperReady, zookeeperSection } from './sections/zookeeper.js';
import { semaphoreOptions, sesamecareSettings } from './lib/subjects.js';

const SECTIONS = ['uncontended', 'contended', 'redlock', 'scale', 'postgres', 'zookeeper', 'etcd'] as const;
type Section = (typeof SECTIONS)[number];

const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));
const ROOT = fileURLToPath(new URL('../', import.meta.url));

function parseArgs(argv: string[]): { quick: boolean; only: Set<Section>; render: string | null } {
  let quick = false;
  let render: string | null = null;
  let only = new Set<Section>(SECTIONS);
  for (const a of argv) {
    if (a === '--quick') quick = true;
    else if (a.startsWith('--render=')) render = a.slice('--render='.length);
    else if (a.startsWith('--only=')) {
      const names = a.slice('--only='.length).split(',');
      for (const n of names) if (!(SECTIONS as readonly string[]).includes(n)) throw new Error(`unknown section ${n}`);
      only = new Set(names as Section[]);
    } else {
      throw new Error(
        `unknown argument ${a} (usage: bench/run.ts [--quick] [--only=${SECTIONS.join(',')}] [--render=<results.json>])`,
      );
    }
  }
  return { quick, only, render };
}

function version(pkg: string): string {
  try {
    return (JSON.parse(readFileSync(`${ROOT}node_modules/${pkg}/package.json`, 'utf8')) as { version: string }).version;
  } catch {
    return 'not installed';
  }
}

const localDate = (d: Date) =>
  `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;

async function servicesOrExit(): Promise<{ redis: string; pg: string }> {
  const down = [];
  for (const p of [6379, ...SHARED]) if (!(await ping(p, 500))) down.push(`redis ${p}`);
  let pgVersion = '?';
  try {
    const c = await pgClient();
    pgVersion = String((await c.query('SHOW server_version')).rows[0]?.server_version ?? '?');
    await c.end();
  } catch (e) {
    down.push(`postgres 5432 (${errText(e)})`);
  }
  if (down.length) {
    process.stderr.write(`[bench] services down: ${down.join(', ')} — run \`bash scripts/services.sh\`\n`);
    process.exit(1);
  }
  const c = await ioredis(6379);
  const info = await c.info('server');
  await quit(c);
  return { redis: /redis_version:(\S+)/.exec(info)?.[1] ?? '?', pg: pgVersion.split(' ')[0]! };
}

/** Computes the goals and writes the JSON (when `json`), the Markdown and the chart. */
function write(results: Results, json: boolean): string[] {
  const { meta } = results;
  results.goals = goals(results);
  mkdirSync(RESULTS, { recursive: true });
  const base = `${meta.date}-${meta.host}${meta.quick ? '-quick' : ''}`;
  const chart = meta.quick ? 'contended-wait-quick.svg' : 'contended-wait.svg';
  const files = [`${base}.md`];
  if (json) {
    writeFileSync(`${RESULTS}${base}.json`, JSON.stringify(results, null, 2) + '\n');
    files.unshift(`${base}.json`);
  }
  writeFileSync(`${RESULTS}${base}.md`, markdown(results, chart));
  const c = results.contended;
  if (c?.runs.length) {
    const o = c.options;
    writeFileSync(
      `${RESULTS}${chart}`,
      waitChart(
        c.runs,
        `${o.workers} processes, one key, ${o.csMs} ms critical section, ${o.grants} grants in total; ` +
          `host ${meta.host}, ${meta.date}; ${meta.command}`,
      ),
    );
    files.push(chart);
  }
  return files.map((f) => `bench/results/${f}`);
}

async function main(): Promise<number> {
  const { quick, only, render } = parseArgs(process.argv.slice(2));
  if (render) {
    // re-render the Markdown and the chart from a results file (after a change to the report code)
    const results = JSON.parse(readFileSync(render, 'utf8')) as Results;
    process.stderr.write(`[bench] wrote ${write(results, false).join(', ')}\n`);
    return 0;
  }
  installCleanup();
  const started = new Date();
  const t0 = now();
  const log = (line: string) =>
    process.stderr.write(`[bench ${((now() - t0) / 1000).toFixed(1).padStart(5)}s] ${line}\n`);
  const runId = `${process.pid.toString(36)}${Date.now().toString(36)}`;
  const versions = await servicesOrExit();
  const co = contendedOptions({ quick });
  const meta: Meta = {
    date: localDate(started),
    host: hostname(),
    command: quick ? 'npx tsx bench/run.ts --quick' : 'npm run bench',
    quick,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model.trim() ?? '?',
    loadAvgAtStart: loadavg(),
    redisVersion: versions.redis,
    postgresVersion: versions.pg,
    packages: Object.fromEntries(
      ['ioredis', 'redis', 'pg', '@sesamecare-oss/redlock', 'redis-semaphore', 'better-sqlite3', 'etcd3', 'tsx'].map(
        (p) => [p, version(p)],
      ),
    ),
    startedAt: started.toISOString(),
    durationMs: 0,
    notRun: [
      {
        name: 'redlock-universal',
        reason: `requires Node ≥ 22 (its "engines"); this machine runs Node ${process.version}, so it is not installed or run`,
      },
    ],
    settings: {
      leasehold: `${SOURCE_LABEL}; ttl 30 s (contended: 5 s), wait 5 s (contended: the run deadline), renew on (ttl/3); push wake-ups`,
      '@sesamecare-oss/redlock': `${JSON.stringify(sesamecareSettings(5000))} when waiting (retryCount = wait / retryDelay), default retryCount 10 uncontended; duration = ttl`,
      'redis-semaphore': `${JSON.stringify({ ...semaphoreOptions({ ttlMs: 30_000, waitMs: 5_000 }), onLockLost: undefined })} (defaults; refreshInterval 0.8 × lockTimeout); a new Mutex per acquire`,
      sqlite:
        'leasehold sqlite(): a temporary database file per run, WAL, synchronous NORMAL, pollInterval 20 ms (the queue head polls every 1 ms); raw SQLite: BEGIN IMMEDIATE held for the critical section, busy_timeout 5 s',
      'raw floor':
        'ioredis SET key token NX PX ttl + EVALSHA compare-and-delete (2 round trips); Postgres: pg_try_advisory_lock / pg_advisory_unlock on one pg.Client',
      postgres: `leasehold postgres(pool): a pg Pool of ${POOL_MAX} sequentially, of ${CONTENDED_POOL_MAX} in each contended worker process; raw floor: one pg.Client`,
      etcd: 'leasehold etcd(client): one etcd3 client per process, leaseTtl 10 s; raw floor: etcd3 kv.put + kv.deleteRange of one key (2 round trips, 2 raft commits)',
      contended: `${co.workers} forked processes (tsx), each its own connection; ${co.grants} grants in total (an equal share per process), critical section = setTimeout(${co.csMs})`,
    },
  };
  const results: Results = { meta, goals: [], errors: [] };
  // outside any section (the readiness probes): a signal that never aborts
  const ctx: Ctx = { quick, runId, log, signal: new AbortController().signal };
  const budget = quick ? 60_000 : 420_000;
  // a section past its budget is stopped (its processes killed, its clients closed) and the next
  // one starts only once it has wound down; its late results are dropped (lib/scope.ts)
  const section = async <T>(name: Section, f: (ctx: Ctx) => Promise<T>): Promise<T | undefined> => {
    if (!only.has(name)) return undefined;
    log(`== ${name}`);
    const out = await runSection(name, budget, (signal) => f({ ...ctx, signal }), { log });
    if (out.ok) return out.value;
    results.errors.push({ section: name, error: out.error });
    log(`${name} failed: ${out.error}`);
    return undefined;
  };

  const pgReady = only.has('postgres') ? await postgresReady(ctx) : null;
  if (pgReady && !pgReady.ready) log(`leasehold postgres() not measured: ${pgReady.reason}`);
  const zkReady = only.has('zookeeper') ? await zookeeperReady() : null;
  if (zkReady) {
    log(`ZooKeeper at 127.0.0.1:2181 not measured: ${zkReady}`);
    results.errors.push({ section: 'zookeeper', error: zkReady });
  }
  const etcdUp = only.has('etcd') ? await etcdReady(ctx) : null;
  if (etcdUp && !etcdUp.ready) results.errors.push({ section: 'etcd', error: etcdUp.reason });

  results.uncontended = await section('uncontended', (c) => uncontended(c));
  const plans: ContendedPlan[] = [
    { lib: 'leasehold', name: 'leasehold (redis)', config: 'push wake-up, fair queue' },
    { lib: 'sesamecare', name: '@sesamecare-oss/redlock', config: 'polls 200 ± 100 ms' },
    { lib: 'semaphore', name: 'redis-semaphore Mutex', config: 'polls every 10 ms' },
    {
      lib: 'fair-raw',
      name: 'raw fair hand-off (diagnostic floor)',
      config: 'a turn passed round-robin: RPUSH to the next BLPOP',
    },
    { lib: 'leasehold-sqlite', name: 'leasehold (sqlite)', config: 'data_version polling, fair queue, one host' },
    { lib: 'sqlite-raw', name: 'raw SQLite BEGIN IMMEDIATE', config: "SQLite's busy handler, one host" },
  ];
  if (!quick) {
    // Redlock on the five shared nodes (section 3's); a full run only: the poller takes its deadline
    plans.splice(
      4,
      0,
      {
        lib: 'leasehold-redlock',
        name: 'leasehold (redlock, 5 nodes)',
        config: "wakes the head's process, fair grant on a majority",
      },
      { lib: 'sesamecare-5', name: '@sesamecare-oss/redlock (5 nodes)', config: 'polls 200 ± 100 ms' },
    );
  }
  if (pgReady?.ready) {
    plans.push({ lib: 'pg-raw', name: 'raw pg_advisory_lock (floor)', config: 'blocks in the server' });
    plans.push({
      lib: 'leasehold-pg',
      name: 'leasehold (postgres)',
      config: "the server's lock queue (FIFO, one wake-up)",
    });
  }
  if (only.has('zookeeper') && zkReady === null) {
    plans.push({ lib: 'leasehold-zk', name: 'leasehold (zookeeper)', config: 'predecessor watch, fair by sequence' });
  }
  results.contended = await section('contended', (c) => contended(c, plans, co));
  results.redlock = await section('redlock', (c) => redlockSection(c));
  if (results.redlock?.stall?.error)
    results.errors.push({ section: 'redlock stall', error: results.redlock.stall.error });
  results.scale = await section('scale', (c) => scale(c));
  if (pgReady) results.postgres = await section('postgres', (c) => postgresSection(c, pgReady));
  if (zkReady === null) results.zookeeper = await section('zookeeper', (c) => zookeeperSection(c));
  if (results.zookeeper?.error) results.errors.push({ section: 'zookeeper', error: results.zookeeper.error });
  if (etcdUp?.ready) results.etcd = await section('etcd', (c) => etcdSection(c, etcdUp.version, co));
  if (results.etcd?.error) results.errors.push({ section: 'etcd', error: results.etcd.error });
  await closeQuickPool();
  for (const f of results.scale?.failures ?? []) results.errors.push({ section: `scale ${f.lib}`, error: f.error });
  for (const f of results.contended?.failures ?? [])
    results.errors.push({ section: `contended ${f.name}`, error: f.error });
  // a subject's failed operations fail the run too (its verdicts are refused in goals())
  results.errors.push(...subjectErrors(results));
  await purgePostgres(runId).catch(() => {});

  meta.durationMs = Math.round(now() - t0);
  log(`wrote ${write(results, true).join(', ')}`);
  for (const g of results.goals) {
    log(`${g.id} ${g.met === null ? '' : g.met ? 'met: ' : 'MISSED: '}${g.measured}`);
  }
  return results.errors.length ? 1 : 0;
}

let code = 1;
try {
  code = await main();
} catch (e) {
  process.stderr.write(`[bench] fatal: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
} finally {
  await runCleanup();
}
process.exit(code);
