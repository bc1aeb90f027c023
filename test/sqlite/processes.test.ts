/**
 * SQLite across real processes on one host: mutual exclusion and fairness with 8 processes and
 * 1 ms critical sections; a change by another process reaches a watcher by data_version polling;
 * the database file deleted under a holder, or under a backend not used yet; a process that cannot
 * read the kernel's boot id beside processes that can.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { sqlite } from '../../src/backends/sqlite/index.js';
import { BackendError, createLocks, LeaseLostError } from '../../src/index.js';
import { TempDbs } from '../support/sqlite.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));
const dbs = new TempDbs();
const procs: ChildProcess[] = [];
afterEach(() => {
  for (const p of procs.splice(0)) if (p.exitCode === null) p.kill('SIGKILL');
});
afterAll(() => dbs.cleanup());

interface Line {
  kind: string;
  start?: number;
  end?: number;
  fence?: string; // null: 'try' refused
  waited?: number;
  error?: string;
  t?: number;
}

/**
 * Starts a child (under the command `wrap`, if any); resolves its lines once it prints
 * {kind:'done'} and exits 0.
 */
function child(args: string[], onLine: (l: Line) => void = () => {}, wrap: string[] = []): Promise<Line[]> {
  const argv = [...wrap, process.execPath, '--import', 'tsx', CHILD, ...args];
  const p = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  procs.push(p);
  const lines: Line[] = [];
  createInterface({ input: p.stdout! }).on('line', (s) => {
    const l = JSON.parse(s) as Line;
    lines.push(l);
    onLine(l);
  });
  return new Promise((resolve, reject) =>
    p.on('exit', (code, sig) =>
      code === 0 && lines.at(-1)?.kind === 'done' ? resolve(lines) : reject(new Error(`child exited ${code ?? sig}`)),
    ),
  );
}

test('8 processes, one key, 1 ms critical sections: no overlap, every process served, fences increase', async () => {
  const db = dbs.path();
  const per = 40;
  const runs = await Promise.all(Array.from({ length: 8 }, () => child(['contend', db, 'hot', String(per), '1'])));
  const holds = runs.flatMap((lines, p) =>
    lines.filter((l) => l.kind === 'hold').map((l) => ({ ...l, p }) as Required<Line> & { p: number }),
  );
  for (const lines of runs) expect(lines.filter((l) => l.kind === 'hold')).toHaveLength(per);
  holds.sort((x, y) => x.start - y.start);
  for (let i = 1; i < holds.length; i++) {
    // the next hold starts after the previous one ended (same monotonic clock in every process)
    expect(holds[i]!.start).toBeGreaterThanOrEqual(holds[i - 1]!.end);
    expect(BigInt(holds[i]!.fence) > BigInt(holds[i - 1]!.fence)).toBe(true);
  }
  // fair: with every process queued, nobody waits for more than a few rounds of the others
  const waits = holds.map((h) => h.waited).sort((x, y) => x - y);
  const switches = holds.filter((h, i) => i > 0 && h.p !== holds[i - 1]!.p).length;
  console.log(
    `[sqlite 8 procs] ${holds.length} grants, wait p50 ${waits[Math.floor(waits.length / 2)]!.toFixed(1)} ms, ` +
      `max ${waits.at(-1)!.toFixed(1)} ms, holder changed on ${((100 * switches) / (holds.length - 1)).toFixed(0)} % of grants`,
  );
  expect(waits.at(-1)!).toBeLessThan(2000);
}, 60_000);

test('a grant and a release in another process reach a watcher by polling', async () => {
  const db = dbs.path();
  const backend = sqlite(db, { pollInterval: '20ms' });
  const locks = createLocks(backend, { prefix: 'lh-proc' });
  // one clock for both processes: the system's monotonic clock (the child stamps its grant with it)
  const clock = (): number => Number(process.hrtime.bigint()) / 1e6;
  const calls: number[] = [];
  const unwatch = await backend.watch('lh-proc:watched', () => calls.push(clock()));
  try {
    let heldAt = 0;
    let grantedAt = 0;
    const done = child(['hold', db, 'watched', '400'], (l) => {
      if (l.kind === 'held') [heldAt, grantedAt] = [clock(), l.t!];
    });
    done.catch(() => {}); // may reject before it is awaited below
    await expect.poll(() => heldAt, { timeout: 10_000 }).toBeGreaterThan(0);
    await expect.poll(() => calls.length, { timeout: 1000 }).toBeGreaterThan(0);
    expect(calls[0]! - heldAt).toBeLessThan(100);
    const info = await locks.inspect('watched');
    expect(info?.value).toMatch(/^pid-\d+$/);
    await done;
    // the release (≥ 400 ms after the grant, on the child's stamp: a late read of its line here
    // cannot shorten the gap) was seen too
    await expect.poll(() => calls.at(-1)! - grantedAt, { timeout: 1000 }).toBeGreaterThanOrEqual(390);
    expect(await locks.inspect('watched')).toBeNull();
  } finally {
    unwatch();
    await locks.close();
  }
}, 30_000);

describe.each([
  ['the file, its -wal and -shm are deleted', ['', '-wal', '-shm']],
  ['only its -wal and -shm are deleted', ['-wal', '-shm']],
])('%s while a process holds a lock', (_, deleted) => {
  test('its lease is lost, and another process never gets a lower fence', async () => {
    const db = dbs.path();
    const locks = createLocks(sqlite(db), { ttl: '1s', prefix: 'lh-proc' });
    for (let i = 0; i < 2; i++) await (await locks.acquire('job')).release();
    const lease = await locks.acquire('job');
    try {
      for (const s of deleted) rmSync(db + s);
      const [b] = (await child(['try', db, 'job'])).filter((l) => l.kind === 'try');
      // the other process opened fresh files: it may be granted, but above every earlier fence
      // (before: fence 1 after 3, both holding)
      if (b!.fence) expect(BigInt(b!.fence) > lease.fence).toBe(true);
      // the holder learns at its next renewal (a third of the TTL), its write refused
      await expect.poll(() => lease.signal.aborted, { timeout: 5000 }).toBe(true);
      expect(lease.held).toBe(false);
      await expect(lease.extend()).rejects.toBeInstanceOf(LeaseLostError);
      expect(await lease.release()).toBe(false);
      // nothing is written to the files this process still has open: an acquire fails, not transient
      const e = await locks.tryAcquire('other').catch((x: unknown) => x);
      expect(e).toBeInstanceOf(BackendError);
      expect((e as Error).message).toMatch(/was deleted while this backend had it open; its leases are lost/);
    } finally {
      await locks.close();
    }
  }, 30_000);
});

test('a backend made before its file was deleted and made again by another process refuses at its first use', async () => {
  const db = dbs.path();
  const first = createLocks(sqlite(db), { prefix: 'lh-proc' });
  await (await first.acquire('job')).release();
  await first.close(); // the last connection: its -wal and -shm are gone with it
  // made now (SQLite opens the file), first used later: a service that locks only at night
  const late = createLocks(sqlite(db), { ttl: '10s', prefix: 'lh-proc' });
  try {
    for (const s of ['', '-wal', '-shm']) rmSync(db + s, { force: true });
    // another process makes the file again and holds the lock
    let held = false;
    const other = child(['hold', db, 'job', '3000'], (l) => {
      if (l.kind === 'held') held = true;
    });
    other.catch(() => {}); // may reject before it is awaited below
    await expect.poll(() => held, { timeout: 10_000 }).toBe(true);
    // a checkpoint (any connection's, at any commit past 1,000 pages) moves its commits into its file
    const raw = new Database(db, { timeout: 2000 });
    raw.pragma('wal_checkpoint(TRUNCATE)');
    raw.close();
    // `late` holds the deleted file: it must not read it through the other process's -wal and
    // -shm, nor write into them (before: granted, beside the other process's lease)
    const e = await late.tryAcquire('job').then(
      (lease) => lease,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(BackendError);
    expect((e as Error).message).toMatch(/was replaced by another file while this backend had it open/);
    await expect(late.acquire('else', { wait: '1s' })).rejects.toBeInstanceOf(BackendError);
    // the other process's files were left alone: it released and closed cleanly
    await other;
  } finally {
    await late.close();
  }
}, 30_000);

/**
 * The command that runs a child unable to read the kernel's boot id, as in a systemd unit with
 * `ProcSubset=pid` (no /proc/sys): its own mount namespace, in an unprivileged user namespace, with
 * an empty directory over /proc/sys/kernel/random. Null where this host allows no user namespace.
 */
function withoutBootId(): string[] | null {
  const hide = 'mount -t tmpfs none /proc/sys/kernel/random';
  const ns = ['unshare', '--user', '--map-root-user', '--mount', 'sh', '-c'];
  const probe = spawnSync(ns[0]!, [...ns.slice(1), `${hide} && ! test -e /proc/sys/kernel/random/boot_id`]);
  return probe.status === 0 ? [...ns, `${hide} && exec "$0" "$@"`] : null;
}

describe.skipIf(withoutBootId() === null)(
  'a process that cannot read the boot id (the wall clock) beside ones that can',
  () => {
    const hidden = withoutBootId()!;
    const tried = async (args: string[], onLine?: (l: Line) => void) =>
      (await child(args, onLine, hidden)).find((l) => l.kind === 'try')!;

    test('it is refused a file the others use, and drops none of their leases', async () => {
      const db = dbs.path();
      const locks = createLocks(sqlite(db), { ttl: '10s', prefix: 'lh-proc' });
      try {
        const lease = await locks.acquire('job');
        // before: it took the file over (the clocks differ: "another boot"), dropped the lease, was granted
        const t = await tried(['try', db, 'job']);
        expect(t.fence).toBeUndefined();
        expect(t.error).toMatch(/BackendError: .*cannot read the boot id/);
        expect(lease.held).toBe(true);
        await lease.extend();
        expect(await locks.inspect('job')).toMatchObject({ fence: lease.fence });
      } finally {
        await locks.close();
      }
    }, 30_000);

    test('one that opened the file first keeps its lease: the others are refused while it is live', async () => {
      const db = dbs.path();
      let fence: string | undefined;
      const holder = child(['hold', db, 'job', '2000'], (l) => void (l.kind === 'held' && (fence = l.fence)), hidden);
      holder.catch(() => {}); // may reject before it is awaited below
      await expect.poll(() => fence, { timeout: 10_000 }).toBeDefined();
      const locks = createLocks(sqlite(db), { prefix: 'lh-proc' });
      try {
        // before: the file was taken over, the live lease dropped, the lock granted beside it
        const e = await locks.tryAcquire('job').then(
          (lease) => lease,
          (x: unknown) => x,
        );
        expect(e).toBeInstanceOf(BackendError);
        expect((e as Error).message).toMatch(/in use by a process on the wall clock/);
        await holder;
        // nothing live in the file any more: it is taken over, fences still increasing
        const after = await locks.tryAcquire('job');
        expect(after!.fence > BigInt(fence!)).toBe(true);
      } finally {
        await locks.close();
      }
    }, 30_000);

    test('one that opened the file before the others took it over writes nothing more', async () => {
      const db = dbs.path();
      let open = false;
      const later = tried(['later', db, 'job', '1500'], (l) => void (l.kind === 'open' && (open = true)));
      later.catch(() => {}); // may reject before it is awaited below
      await expect.poll(() => open, { timeout: 10_000 }).toBe(true);
      const locks = createLocks(sqlite(db), { ttl: '10s', prefix: 'lh-proc' });
      try {
        const lease = await locks.acquire('job'); // nothing live: the file is taken over
        // before: it stored a wall-clock expiry beside the monotonic ones, and was granted
        const t = await later;
        expect(t.fence).toBeUndefined();
        expect(t.error).toMatch(/BackendError: .*cannot read the boot id/);
        expect(lease.held).toBe(true);
        await lease.extend();
      } finally {
        await locks.close();
      }
    }, 30_000);
  },
);
