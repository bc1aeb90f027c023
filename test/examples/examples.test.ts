/**
 * Every example in examples/ runs as a user would run it — `leasehold` resolved through the
 * package's `exports` to the built dist/ (examples/tsconfig.json has no path mapping) — against
 * the memory backend and each local server, and must end with its own "ok" line: the examples
 * check their claims (one leader at a time, one run per window, one charge, stale write refused)
 * and exit 1 otherwise. A recipe that needs a capability a backend does not declare must be
 * refused with a clear error instead (and is required to pass once the backend gains it).
 */
import { spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { afterAll, beforeAll, describe, test } from 'vitest';
import { fromUrl, type Backend } from '../../src/index.js';
import { ensureBuilt } from '../../scripts/built.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SERVERS: Record<string, string | undefined> = {
  memory: undefined,
  redis: process.env.LEASEHOLD_REDIS_URL ?? 'redis://127.0.0.1:6379',
  postgres: process.env.LEASEHOLD_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  redlock: 'redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003',
  sqlite: `sqlite:${join(tmpdir(), `leasehold-examples-${process.pid}`, 'locks.db')}`,
  etcd: `etcd://${process.env.LEASEHOLD_ETCD_HOSTS ?? '127.0.0.1:2379'}`,
  // one URL that lists its hosts with commas: passed whole, not split into a Redlock list
  'etcd, two hosts': 'etcd://127.0.0.1:2379,localhost:2379',
};
afterAll(() => rmSync(join(tmpdir(), `leasehold-examples-${process.pid}`), { recursive: true, force: true }));
/** The capability each recipe needs (the example must be refused clearly where it is missing). */
const RECIPES: Record<string, 'value' | 'results' | null> = {
  election: 'value',
  cron: null,
  idempotency: 'results',
  fencing: null,
};
const CLIENT_EXAMPLES = ['redis-ioredis', 'redis-node-redis', 'redlock', 'postgres-pg', 'postgres-postgresjs', 'demo'];

let runs = 0;
interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  out: string;
  err: string;
}

function runExample(
  name: string,
  args: string[] = [],
  onLine?: (line: string, kill: (s: NodeJS.Signals) => void) => void,
): Promise<Run> {
  const child = spawn(process.execPath, ['--import', 'tsx', join('examples', `${name}.ts`), ...args], {
    cwd: root,
    env: {
      ...process.env,
      TSX_TSCONFIG_PATH: join(root, 'examples', 'tsconfig.json'),
      LEASEHOLD_PREFIX: `examples-test-${process.pid}-${++runs}`,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let pending = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    pending += d;
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      onLine?.(line, (s) => child.kill(s));
    }
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((r) =>
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      r({ code, signal, out, err });
    }),
  );
}

const lastLine = (s: string) => s.trim().split('\n').at(-1) ?? '';
const describeRun = (r: Run) => `exit ${r.code ?? r.signal}\n--- stdout\n${r.out}\n--- stderr\n${r.err}`;

const capabilities = new Map<string, Backend['capabilities']>();

beforeAll(async () => {
  ensureBuilt(root);
  for (const [server, url] of Object.entries(SERVERS)) {
    if (!url) continue;
    // a missing server fails here (never a skip)
    const b = await fromUrl(/^rediss?:\/\/[^,]+(,rediss?:\/\/[^,]+)+$/.test(url) ? url.split(',') : url);
    capabilities.set(server, b.capabilities);
    await b.close();
  }
}, 120_000);

// The examples mostly wait (timers, leases running out): they run a few at a time (vitest's
// maxConcurrency), each in its own process, so each uses the test's own `expect`.
describe.each(Object.keys(RECIPES))('examples/%s.ts', (recipe) => {
  test.concurrent.for(Object.keys(SERVERS))('on %s', async (server, { expect }) => {
    const url = SERVERS[server];
    const r = await runExample(recipe, url ? [url] : []);
    const needs = RECIPES[recipe];
    if (needs && url && !capabilities.get(server)?.[needs]) {
      // the backend does not declare the capability: an honest, clear refusal
      expect(r.code, describeRun(r)).not.toBe(0);
      expect(r.err).toMatch(/cannot store a (holder|leader) value|has no result store/);
      return;
    }
    expect(r.code, describeRun(r)).toBe(0);
    expect(lastLine(r.out)).toMatch(/^ok: /);
  });
});

describe('examples/shutdown.ts: SIGTERM releases the lock and exits 0', () => {
  test.concurrent.for(Object.keys(SERVERS))('on %s', async (server, { expect }) => {
    const url = SERVERS[server];
    let sent = false;
    const r = await runExample('shutdown', url ? [url] : [], (line, kill) => {
      if (!sent && line.startsWith('holding queue-consumer')) {
        sent = true;
        setTimeout(() => kill('SIGTERM'), 300); // a few steps of work, then the orchestrator stops it
      }
    });
    expect(sent, describeRun(r)).toBe(true);
    expect(r.code, describeRun(r)).toBe(0);
    expect(r.out).toContain('SIGTERM: finishing the current step, then releasing');
    expect(lastLine(r.out)).toMatch(/^the next instance took over in \d+ ms$/);
  });
});

describe('the per-client examples', () => {
  test.concurrent.for(CLIENT_EXAMPLES)('examples/%s.ts', async (name, { expect }) => {
    const r = await runExample(name);
    expect(r.code, describeRun(r)).toBe(0);
    if (name !== 'demo') expect(lastLine(r.out)).toMatch(/^ok: /);
    else expect(r.out).toContain('balance 120 (expected 120): no lost update');
  });
});
