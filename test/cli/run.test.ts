/**
 * `leasehold run` as users run it — the built executable in separate processes — against
 * SQLite, Redis and PostgreSQL (the shared servers; a key prefix per run).
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { TempDbs } from '../support/sqlite.js';
import { cli, ensureBuilt, JOB, killAll, monotonic, readLog, start, until } from './helpers.js';

const dbs = new TempDbs();
beforeAll(() => ensureBuilt(), 180_000);
afterEach(() => killAll());
afterAll(() => dbs.cleanup());

const targets = [
  { name: 'sqlite', url: `sqlite:${dbs.path()}`, session: false, values: true },
  { name: 'redis', url: 'redis://127.0.0.1:6379/0', session: false, values: true },
  { name: 'postgres', url: 'postgres://postgres@127.0.0.1:5432/test', session: true, values: false },
];

describe.each(targets)('leasehold run on $name', ({ name, url, session, values }) => {
  const prefix = `lh-cli-${name}-${randomUUID().slice(0, 8)}`;
  let n = 0;
  const env = () => ({ LEASEHOLD_URL: url });
  const fresh = () => ({ key: `job${++n}`, log: join(dbs.path(`log${n}`)) });
  const job = (key: string, log: string, flags: string[], jobEnv: Record<string, string> = {}) =>
    start(['run', key, '--prefix', prefix, ...flags, '--', process.execPath, JOB], {
      ...env(),
      JOB_LOG: log,
      ...jobEnv,
    });

  test('concurrent runs on one key never overlap; each command sees its key, token and a fence that grows run after run', async () => {
    const { key, log } = fresh();
    const runs = Array.from({ length: 5 }, (_, i) =>
      job(key, log, ['--ttl', '5s'], { JOB_MS: '150', JOB_TAG: `r${i}` }),
    );
    const results = await Promise.all(runs.map((r) => r.done));
    for (const r of results) expect(r.code, r.stderr).toBe(0);
    const lines = readLog(log);
    const starts = lines.filter((l) => l.ev === 'start').sort((a, b) => a.t - b.t);
    const ends = lines.filter((l) => l.ev === 'end');
    expect(starts).toHaveLength(5);
    expect(ends).toHaveLength(5);
    for (let i = 0; i < starts.length; i++) {
      const s = starts[i]!;
      expect(s.key).toBe(key);
      expect(s.hasToken).toBe(true);
      const end = ends.find((e) => e.pid === s.pid)!;
      if (i > 0) {
        const prevEnd = ends.find((e) => e.pid === starts[i - 1]!.pid)!;
        expect(s.t).toBeGreaterThanOrEqual(prevEnd.t); // no overlap
        expect(BigInt(s.fence!) > BigInt(starts[i - 1]!.fence!)).toBe(true);
      }
      expect(end.t).toBeGreaterThan(s.t);
    }
    // a later run still gets a higher fence
    const again = await job(key, log, [], { JOB_MS: '1', JOB_TAG: 'again' }).done;
    expect(again.code).toBe(0);
    const last = readLog(log).filter((l) => l.tag === 'again' && l.ev === 'start')[0]!;
    expect(BigInt(last.fence!) > BigInt(starts.at(-1)!.fence!)).toBe(true);
  }, 60_000);

  test('--wait 0 on a held key exits 75 with one line; --skip-if-busy exits 0; status --json shows the holder', async () => {
    const { key, log } = fresh();
    const holder = job(key, log, ['--ttl', '10s', ...(values ? ['--value', 'worker-7'] : [])], { JOB_MS: '20000' });
    await until(() => readLog(log).some((l) => l.ev === 'start'), 15_000, 'the holder to start');
    const busy = await cli(['run', key, '--prefix', prefix, '--wait', '0', '--', 'true'], env());
    expect(busy.code).toBe(75);
    expect(busy.stderr.trim().split('\n')).toHaveLength(1);
    expect(busy.stderr).toMatch(new RegExp(`^leasehold: "${key}" is held`));
    if (values) expect(busy.stderr).toContain('worker-7');
    // a session backend has no time left to tell (before: "(fence 15, session left)")
    if (session) expect(busy.stderr).toMatch(/ \(fence \d+, held for the holder's session\)\n$/);
    else expect(busy.stderr).toMatch(/ \(fence \d+, \d+\.\ds left\)\n$/);
    const skipped = await cli(['run', key, '--prefix', prefix, '--wait', '0', '--skip-if-busy', '--', 'true'], env());
    expect(skipped.code).toBe(0);
    expect(skipped.stderr).toContain('skipped');
    const timedOut = await cli(['run', key, '--prefix', prefix, '--wait', '300ms', '--', 'true'], env());
    expect(timedOut.code).toBe(75);

    const status = await cli(['status', '--prefix', prefix, '--json'], env());
    expect(status.code, status.stderr).toBe(0);
    const rows = JSON.parse(status.stdout) as { key: string; fence: string; remainingMs: number; value?: string }[];
    const row = rows.find((r) => r.key === key)!;
    expect(row).toBeDefined();
    expect(row.fence).toBe(readLog(log)[0]!.fence);
    if (values) expect(row.value).toBe('worker-7');
    expect(row.remainingMs).toBeLessThanOrEqual(10_000);
    const table = await cli(['status', key.slice(0, 3), '--prefix', prefix], env());
    expect(table.stdout).toMatch(new RegExp(`^KEY\\s+FENCE\\s+HOLDER\\s+LEFT\\n${key}\\s+${row.fence}\\s`, 'm'));
    holder.proc.kill('SIGTERM');
    expect((await holder.done).code).toBe(143);
  }, 60_000);

  test('SIGTERM to leasehold reaches the command and frees the key at once', async () => {
    const { key, log } = fresh();
    const holder = job(key, log, ['--ttl', '20s'], { JOB_MS: '20000' });
    await until(() => readLog(log).some((l) => l.ev === 'start'), 15_000, 'the holder to start');
    holder.proc.kill('SIGTERM');
    const done = await holder.done;
    expect(done.code).toBe(143); // the command died of SIGTERM: 128 + 15
    expect(readLog(log).some((l) => l.ev === 'term')).toBe(true);
    const next = await cli(['run', key, '--prefix', prefix, '--wait', '0', '--', 'true'], env());
    expect(next.code, next.stderr).toBe(0);
  }, 60_000);

  test(`SIGKILL of leasehold: the watchdog stops the command; the key is free ${session ? 'when the session ends' : 'after its TTL'}`, async () => {
    const { key, log } = fresh();
    const holder = job(key, log, ['--ttl', '2s', '--grace', '1s'], { JOB_MS: '30000' });
    await until(() => readLog(log).some((l) => l.ev === 'start'), 15_000, 'the holder to start');
    holder.proc.kill('SIGKILL');
    const killedAt = monotonic();
    await holder.done;
    await until(() => readLog(log).some((l) => l.ev === 'term'), 5000, 'the watchdog to stop the command');
    if (!session) {
      const early = await cli(['run', key, '--prefix', prefix, '--wait', '0', '--', 'true'], env());
      expect(early.code).toBe(75); // still held: nobody released it
    }
    const next = await cli(['run', key, '--prefix', prefix, '--wait', '10s', '--', 'true'], env());
    expect(next.code, next.stderr).toBe(0);
    const freedWithin = monotonic() - killedAt;
    expect(freedWithin).toBeLessThan(2000 + 3000); // TTL + process start-up on a loaded machine
    if (!session) expect(freedWithin).toBeGreaterThanOrEqual(1500);
  }, 60_000);

  test('--ttl 1ms (a lease lost before it could be used) is a usage error: exit 64, nothing run, nothing held', async () => {
    // before, it was granted, lost at once, and each backend told it apart differently (a lost
    // lease, 79, or a failing backend, 69, on a loaded machine); now no ttl below the drift
    // allowance gets to the backend
    const { key, log } = fresh();
    const done = await job(key, log, ['--ttl', '1ms', '--wait', '2s'], { JOB_MS: '300' }).done;
    expect(done.code, done.stderr).toBe(64);
    expect(readLog(log)).toEqual([]); // the command never ran
    expect(done.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/a ttl of 1ms leaves no validity after the drift allowance .*use at least 3ms$/),
    ]);
    const next = await cli(['run', key, '--prefix', prefix, '--wait', '0', '--', 'true'], env());
    expect(next.code, next.stderr).toBe(0);
  }, 60_000);

  test('a lost lease (broken by release --force) stops the command: SIGTERM, exit 79, one line', async () => {
    const { key, log } = fresh();
    const holder = job(key, log, ['--ttl', '1500ms', '--grace', '2s'], { JOB_MS: '30000' });
    await until(() => readLog(log).some((l) => l.ev === 'start'), 15_000, 'the holder to start');
    const broke = await cli(['release', key, '--prefix', prefix, '--force'], env());
    expect(broke.code, broke.stderr).toBe(0);
    expect(broke.stderr).toMatch(new RegExp(`broke the lock on "${key}" \\(fence \\d+`));
    expect(broke.stderr).toMatch(session ? /, held for the holder's session\);/ : /, \d+\.\ds left\);/);
    const brokeAt = monotonic();
    const done = await holder.done;
    expect(done.code).toBe(79);
    expect(done.stderr.trim().split('\n')).toHaveLength(1);
    expect(done.stderr).toMatch(/lost/);
    const term = readLog(log).find((l) => l.ev === 'term')!;
    expect(term).toBeDefined();
    expect(term.t - brokeAt).toBeLessThan(500 + 1000); // one renewal interval, plus a loaded machine
    const nothing = await cli(['release', key, '--prefix', prefix, '--force', '--json'], env());
    expect(JSON.parse(nothing.stdout)).toEqual({ released: false, key });
  }, 60_000);
});
