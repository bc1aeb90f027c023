/**
 * Fences never go back, on a private cluster this test makes (initdb in a temp directory, a free
 * port, synchronous_commit = off so only leasehold's own durability holds the epoch): through a
 * clean restart, a crash (kill -9 of the postmaster: unlogged tables are emptied) and
 * pg_terminate_backend of the session, for session locks and xactLock alike.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { postgres, xactLock } from '../../src/backends/postgres/index.js';
import { freePort } from '../support/ports.js';

function pgBin(name: string): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) if (existsSync(join(root, v, 'bin', name))) return join(root, v, 'bin', name);
  throw new Error(`${name} not found under ${root}/*/bin (install postgresql: scripts/services.sh)`);
}

const asRoot = process.getuid?.() === 0;
/** Runs a server binary as the postgres user when we are root (the server refuses root). */
function run(bin: string, args: string[]): string {
  const [cmd, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
  return execFileSync(cmd, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

let dir = '';
let port = 0;
const url = () => `postgres://postgres@127.0.0.1:${port}/postgres`;

function start(): void {
  run(pgBin('pg_ctl'), [
    '-D',
    join(dir, 'data'),
    '-l',
    join(dir, 'log'),
    '-w',
    '-t',
    '60',
    '-o',
    `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c synchronous_commit=off -c fsync=on`,
    'start',
  ]);
}
function stop(): void {
  run(pgBin('pg_ctl'), ['-D', join(dir, 'data'), '-m', 'fast', '-w', 'stop']);
}
/** kill -9 of the postmaster, then waits until none of its processes is left. */
async function crash(): Promise<void> {
  const pid = Number(readFileSync(join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
  process.kill(pid, 'SIGKILL');
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const left = spawnSync('pgrep', ['-f', `-D ${join(dir, 'data')}|postgres: .*${port}`])
      .stdout.toString()
      .trim();
    const alive = (() => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    })();
    if (!alive && !left) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'leasehold-pgcrash-'));
  chmodSync(dir, 0o755);
  if (asRoot) chownSync(dir, Number(execFileSync('id', ['-u', 'postgres']).toString()), 0);
  run(pgBin('initdb'), ['-D', join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync']);
}, 120_000);

afterAll(() => {
  try {
    stop();
  } catch {
    // already down
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** One grant through a fresh pool (a session lock) and one through xactLock; both fences. */
async function grants(key: string): Promise<bigint[]> {
  const pool = new pg.Pool({ connectionString: url(), max: 3 });
  pool.on('error', () => {});
  try {
    const b = postgres(pool);
    const g = await b.acquire(`leasehold:${key}`, { token: 'tok', ttlMs: 30_000 });
    expect(g).not.toBeNull();
    expect(await b.release(`leasehold:${key}`, 'tok')).toBe(true);
    await b.close();
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const f = await xactLock(c, key);
      await c.query('COMMIT');
      return [g!.fence, f];
    } finally {
      c.release();
    }
  } finally {
    await pool.end();
  }
}

test('fences never go back: clean restart, kill -9 of the postmaster, pg_terminate_backend', async () => {
  port = await freePort();
  start();
  const seen: bigint[] = [];
  const more = (fs: bigint[], why: string) => {
    for (const f of fs) {
      const last = seen.at(-1) ?? 0n;
      expect(f > last, `${why}: fence ${f} after ${last}`).toBe(true);
      seen.push(f);
    }
  };
  for (let i = 0; i < 5; i++) more(await grants('k'), 'before any restart');

  stop();
  start();
  more(await grants('k'), 'after a clean restart');

  // a crash: the holder rows and the fence sequence (unlogged) are reset; the epoch, flushed
  // before any grant of the last start, puts every new fence above the old ones
  for (let i = 0; i < 3; i++) more(await grants('k'), 'before the crash');
  await crash();
  start();
  const admin = new pg.Client({ connectionString: url() });
  admin.on('error', () => {}); // the crashes below end it
  await admin.connect();
  expect((await admin.query('select count(*)::int as n from leasehold_holders')).rows[0].n).toBe(0); // emptied
  // and the fence sequence (unlogged) starts over: only the epoch keeps the next fences higher
  expect((await admin.query('select is_called from leasehold_fence_seq')).rows[0].is_called).toBe(false);
  more(await grants('k'), 'after kill -9');

  // the session of a held lock is terminated: the next holder's fence is higher
  const pool = new pg.Pool({ connectionString: url(), max: 3 });
  pool.on('error', () => {});
  const holder = postgres(pool);
  const lost: string[] = [];
  holder.onLost!((k) => lost.push(k));
  const g = await holder.acquire('leasehold:k', { token: 'held', ttlMs: 30_000 });
  more([g!.fence], 'held');
  await admin.query('select pg_terminate_backend($1::int4)', [holder.sessionPid]);
  while (lost.length === 0) await new Promise((r) => setTimeout(r, 10));
  more(await grants('k'), 'after pg_terminate_backend');
  await holder.close();
  await pool.end();

  // crash twice in a row with nothing granted in between: still no repeat
  await admin.end().catch(() => {});
  await crash();
  start();
  await crash();
  start();
  more(await grants('k'), 'after two crashes');
}, 240_000);
