/**
 * Fences never go back, on a private cluster this test makes (initdb in a temp directory, a free
 * port, synchronous_commit = off so only leasehold's own durability holds the epoch): through a
 * clean restart, a crash (kill -9 of the postmaster: unlogged tables are emptied), a crash of one
 * server process (kill -9 of a backend: the postmaster stays up, with its start time, and runs
 * crash recovery, which empties them too) and pg_terminate_backend of the session, for session
 * locks and xactLock alike; and a rolled-back xactLock's fence is not issued again after a crash.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { FenceEpochError, migrate, postgres, xactLock } from '../../src/backends/postgres/index.js';
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
  return execFileSync(cmd, argv, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
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
/** Starts the cluster unless it runs (each test leaves it running; a failed one may not). */
async function up(): Promise<void> {
  if (!port) port = await freePort();
  try {
    run(pgBin('pg_ctl'), ['-D', join(dir, 'data'), 'status']);
  } catch {
    start();
  }
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

/**
 * kill -9 of one idle server process (not the postmaster), then waits until the server accepts
 * queries again: a witness session, open before, is ended by the postmaster's crash handling (it
 * ends every session before crash recovery); connections are refused until recovery is done.
 */
async function crashOneBackend(): Promise<void> {
  const open = async () => {
    const c = new pg.Client({ connectionString: url() });
    c.on('error', () => {});
    await c.connect();
    return c;
  };
  const witness = await open();
  const victim = await open();
  const pid = Number((await victim.query('select pg_backend_pid() as p')).rows[0].p);
  process.kill(pid, 'SIGKILL');
  const deadline = Date.now() + 60_000;
  const pause = () => new Promise((r) => setTimeout(r, 100));
  while (
    await witness.query('select 1').then(
      () => true,
      () => false,
    )
  ) {
    if (Date.now() > deadline) throw new Error('the postmaster did not end the other sessions');
    await pause();
  }
  await witness.end().catch(() => {});
  await victim.end().catch(() => {});
  for (;;) {
    try {
      const c = await open();
      await c.end();
      return;
    } catch (e) {
      if (Date.now() > deadline) throw e; // "the database system is in recovery mode"
      await pause();
    }
  }
}

/** The server's start time, the fence sequence's state and the mark (an admin connection of its own). */
async function state(): Promise<{
  started: string;
  called: boolean;
  marks: number;
}> {
  const c = new pg.Client({ connectionString: url() });
  await c.connect();
  try {
    const r = await c.query(`select pg_postmaster_start_time()::text as started,
      (select is_called from leasehold_fence_seq) as called`);
    // -1: no mark table (an older version)
    const marks = await c.query('select count(*)::int as n from leasehold_epoch_mark').then(
      (m) => Number(m.rows[0].n),
      () => -1,
    );
    return { ...r.rows[0], marks };
  } finally {
    await c.end();
  }
}

/** An xactLock in a transaction of its own; committed unless `rollback`. */
async function xactGrant(key: string, rollback = false): Promise<bigint> {
  const c = new pg.Client({ connectionString: url() });
  await c.connect();
  try {
    await c.query('BEGIN');
    try {
      return await xactLock(c, key);
    } finally {
      await c.query(rollback ? 'ROLLBACK' : 'COMMIT');
    }
  } finally {
    await c.end();
  }
}

/** migrate() through a pool of its own (what records the epoch for xactLock after a reset). */
async function migrated(): Promise<void> {
  const pool = new pg.Pool({ connectionString: url(), max: 2 });
  try {
    await migrate(pool);
  } finally {
    await pool.end();
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
    const g = await b.acquire(`leasehold:${key}`, {
      token: 'tok',
      ttlMs: 30_000,
    });
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

/** Fences as they come, each checked to be above every one before it. */
function ascending() {
  const seen: bigint[] = [];
  const more = (fs: bigint[], why: string) => {
    for (const f of fs) {
      const last = seen.at(-1) ?? 0n;
      expect(f > last, `${why}: fence ${f} after ${last}`).toBe(true);
      seen.push(f);
    }
  };
  return { seen, more };
}

test('fences never go back: clean restart, kill -9 of the postmaster, pg_terminate_backend', async () => {
  port = await freePort();
  start();
  const { seen, more } = ascending();
  for (let i = 0; i < 5; i++) more(await grants('k'), 'before any restart');

  stop();
  start();
  more(await grants('k'), 'after a clean restart');
  // a clean restart keeps the unlogged sequence and mark: no bump, the same epoch goes on
  expect(seen.at(-1)! >> 40n).toBe(seen.at(-3)! >> 40n);

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
  const g = await holder.acquire('leasehold:k', {
    token: 'held',
    ttlMs: 30_000,
  });
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

test('a crash of one server process (kill -9 of a backend; the postmaster stays up and runs crash recovery): fences go on above, session mode and xactLock', async () => {
  await up();
  const { seen, more } = ascending();
  for (let i = 0; i < 3; i++) more(await grants('b'), 'before the crash');

  const before = await state();
  await crashOneBackend();
  const after = await state();
  // the postmaster did not restart, yet the fence sequence was reset (and the mark with it)
  expect(after.started).toBe(before.started);
  expect(after.called).toBe(false);
  // several processes see the reset at once: each draws above every earlier fence, under one epoch
  const pools = Array.from({ length: 4 }, () => new pg.Pool({ connectionString: url(), max: 3 }));
  try {
    const fences = await Promise.all([
      ...pools.map(async (pool, i) => {
        const b = postgres(pool);
        try {
          const g = await b.acquire(`leasehold:b${i}`, {
            token: 't',
            ttlMs: 30_000,
          });
          return g!.fence;
        } finally {
          await b.close();
        }
      }),
      migrated().then(() => null),
      migrated().then(() => null),
    ]);
    const drawn = fences.filter((f): f is bigint => f !== null);
    const last = seen.at(-1)!;
    for (const f of drawn) expect(f > last, `after the crash, concurrently: fence ${f} after ${last}`).toBe(true);
    expect(new Set(drawn).size).toBe(drawn.length);
    expect(new Set(drawn.map((f) => f >> 40n)).size).toBe(1);
    seen.push(...[...drawn].sort((a, b) => (a < b ? -1 : 1)));
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
  more(await grants('b'), 'after the crash');
  expect(after.marks).toBe(0);

  // again, with xactLock first: migrate() records the epoch in its own commit, xactLock draws above
  await crashOneBackend();
  expect((await state()).called).toBe(false);
  await migrated();
  more([await xactGrant('b')], 'xactLock after the second crash');
  more(await grants('b'), 'after the second crash');
}, 240_000);

test('a rolled-back xactLock fence is never issued again, even across a crash; after a reset xactLock first asks for migrate() (FenceEpochError, nothing drawn)', async () => {
  await up();
  await migrated();
  await grants('r');
  const above = (fs: bigint[], top: bigint, why: string) => {
    for (const f of fs) expect(f > top, `${why}: fence ${f} after a rolled-back ${top}`).toBe(true);
  };
  await crash();
  start();
  // the first grant since the crash would be an xactLock whose transaction rolls back, and the
  // server crashes again before anything else records an epoch
  const first = await xactGrant('r', true).catch((e: unknown) => e);
  const afterRefusal = await state();
  await crash();
  start();
  above(await grants('r'), typeof first === 'bigint' ? first : 0n, 'first grant after a crash, rolled back');
  // with the epoch recorded (migrate), a rolled-back fence does not come back after a crash either
  await migrated();
  const rolledBack = await xactGrant('r', true);
  await crash();
  start();
  above(
    [...(await grants('r')), await xactGrant('r', true)],
    rolledBack,
    'a grant under a recorded epoch, rolled back',
  );
  // the first xactLock after the crash was refused before it locked or drew anything
  expect(first).toBeInstanceOf(FenceEpochError);
  expect((first as FenceEpochError).code).toBe('LEASEHOLD_FENCE_EPOCH');
  expect((first as Error).message).toMatch(/migrate\(pool\)/);
  expect(afterRefusal.called).toBe(false);
  expect(afterRefusal.marks).toBe(0);
}, 240_000);
