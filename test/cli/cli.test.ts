/**
 * The `leasehold` executable beyond `run`'s locking: usage errors, help, exit codes, the embedded
 * default, secrets in URLs, elect, and the demo.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { freePorts } from '../support/ports.js';
import { TempDbs } from '../support/sqlite.js';
import { cli, ensureBuilt, JOB, killAll, readLog, start, until } from './helpers.js';

const dbs = new TempDbs();
beforeAll(() => ensureBuilt(), 180_000);
afterEach(() => killAll());
afterAll(() => dbs.cleanup());

/** An environment whose default database is a fresh file. */
const home = () => {
  const state = dirname(dbs.path());
  return { XDG_STATE_HOME: state, LEASEHOLD_URL: '', db: join(state, 'leasehold', 'locks.db') };
};

describe('usage', () => {
  test.each([
    [[], 'no command'],
    [['bogus'], 'unknown command'],
    [['run'], 'missing key'],
    [['run', 'k'], 'no command to run'],
    [['run', 'k', 'echo', 'hi'], 'command without --'],
    [['run', 'k', 'echo', 'hi', '--'], 'command before --'],
    [['run', '--value', '--', 'k', 'echo', 'hi'], '-- taken as a value'],
    [['elect', 'e', 'echo', 'hi', '--'], 'elect: command before --'],
    [['run', 'k', '--ttl', '0', '--', 'true'], 'ttl 0'],
    [['run', 'k', '--ttl', 'soon', '--', 'true'], 'bad duration'],
    [['run', 'k', '--wait', '-1', '--', 'true'], 'negative wait'],
    [['run', 'k', '--wait', '10', '--', 'true'], 'a duration without a unit'],
    [['run', 'k', '--colour', 'red', '--', 'true'], 'unknown option'],
    [['run', 'x'.repeat(1025), '--', 'true'], 'key too long'],
    [['release', 'k'], 'release without --force'],
    [['status', '--url', 'redis://[::1'], 'malformed URL'],
    [['status', '--url', 'ftp://x'], 'unknown scheme'],
    [['demo', '--workers', '1'], 'too few demo workers'],
    // locks inside one process: two commands would both hold the key
    [['run', 'k', '--url', 'memory:', '--', 'true'], 'memory: excludes nothing between commands'],
    [['elect', 'e', '--url', 'sqlite::memory:', '--', 'true'], "sqlite's :memory: database"],
    [['status', '--url', 'sqlite:%3Amemory%3A'], ':memory: %-escaped'],
    // checked before the backend is opened (the default SQLite file was created first, and an
    // unreachable server made a bad flag exit 69, after a connect attempt)
    [['status', '--prefix', ''], 'empty prefix'],
    [['release', 'k', '--force', '--prefix', 'p'.repeat(257)], 'prefix too long'],
    [['run', 'k', '--prefix', '', '--url', 'redis://127.0.0.1:1', '--', 'true'], 'empty prefix, server down'],
    [['run', 'k', '--ttl', '2ms', '--', 'true'], 'a ttl that leaves no validity'],
    [['elect', 'e', '--ttl', '1ms', '--', 'true'], 'elect: a ttl that leaves no validity'],
  ])('%j exits 64 with one line on stderr (%s)', async (args) => {
    const { db, ...env } = home();
    const r = await cli(args as string[], env);
    expect(r.code).toBe(64);
    const lines = r.stderr.trim().split('\n');
    if (args.length > 0) expect(lines[0]).toMatch(/^leasehold: /);
    if (args.length > 0) expect(lines).toHaveLength(1);
    expect(existsSync(db)).toBe(false); // nothing touched before the arguments were checked
  });

  test('--help of every command has examples; --version prints the version', async () => {
    for (const cmd of [[], ['run'], ['elect'], ['status'], ['release'], ['demo']]) {
      const r = await cli([...cmd, '--help']);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('Examples:');
    }
    expect((await cli(['run', '--help'])).stdout).toMatch(
      /Exit codes: .*64 usage; 69 backend\nunavailable; 75 lock busy/s,
    );
    expect((await cli(['--version'])).stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    // every scheme fromUrl takes for locks between processes is listed; elect (no --wait, no busy exit) says no 75
    const help = (await cli(['--help'])).stdout;
    for (const scheme of ['sqlite:', 'redis+cluster://', 'redis+sentinel://', 'postgres://', 'zk://', 'etcd://'])
      expect(help).toContain(scheme);
    // memory: locks live in one process: the command line does not offer them
    expect(help).not.toContain('memory:');
    expect((await cli(['elect', '--help'])).stdout).not.toMatch(/\b75\b/);
    // the command line refuses a bare number of ms: its hint does not offer one
    const bad = await cli(['run', 'k', '--ttl', 'soon', '--', 'true']);
    expect(bad.stderr).toContain('a number with a unit');
    expect(bad.stderr).not.toContain('a number of ms');
  });
});

describe('exit codes and the embedded default', () => {
  test('the default backend is a SQLite file in $XDG_STATE_HOME/leasehold/', async () => {
    const { db, ...env } = home();
    const r = await cli(['run', 'k', '--', 'true'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(db)).toBe(true);
  });

  test("the command's exit code, 128 + n for a signal, 127 / 126 when it cannot start", async () => {
    const { db: _db, ...env } = home();
    expect((await cli(['run', 'k', '--', 'sh', '-c', 'exit 3'], env)).code).toBe(3);
    expect((await cli(['run', 'k', '--', 'sh', '-c', 'kill -USR1 $$'], env)).code).toBe(128 + 10);
    const missing = await cli(['run', 'k', '--', 'no-such-command-leasehold'], env);
    expect(missing.code).toBe(127);
    expect(missing.stderr).toBe('leasehold: command not found: no-such-command-leasehold\n');
    const plain = dbs.path('not-executable.sh');
    writeFileSync(plain, 'echo hi\n', { mode: 0o644 });
    expect((await cli(['run', 'k', '--', plain], env)).code).toBe(126);
    // the lock was released every time
    expect((await cli(['run', 'k', '--wait', '0', '--', 'true'], env)).code).toBe(0);
  });

  test('an unreachable backend exits 69', async () => {
    const r = await cli(['status', '--url', 'redis://127.0.0.1:1/0']);
    expect(r.code).toBe(69);
    expect(r.stderr).toMatch(/^leasehold: could not connect to redis:\/\/127\.0\.0\.1:1\/0/);
  });
});

describe('--skip-if-busy', () => {
  test('without --wait it makes one attempt: a held key is skipped at once, never waited for and run', async () => {
    // before, it waited (as long as it takes) for the holder to finish, then ran: overlapping
    // cron runs queued up behind each other instead of skipping
    const held = dbs.path('held');
    const ran = dbs.path('ran');
    const env = { LEASEHOLD_URL: `sqlite:${dbs.path()}`, HELD: held, RAN: ran };
    const holder = start(['run', 'cron', '--', 'sh', '-c', ': > "$HELD"; exec sleep 8'], env);
    await until(() => existsSync(held), 15_000, 'the holder to start');
    const r = await cli(['run', 'cron', '--skip-if-busy', '--', 'sh', '-c', ': > "$RAN"'], env);
    expect(holder.proc.exitCode).toBeNull(); // it did not wait for the holder to end
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/^leasehold: "cron" is held .*; skipped\n$/);
    expect(existsSync(ran)).toBe(false);
    holder.proc.kill('SIGTERM');
    await holder.done;
  }, 30_000);
});

describe('Redlock from the command line', () => {
  test('a node down of three: it runs, with one warning naming the node (password hidden); two down: exit 69', async () => {
    // before, any node down refused to start (exit 69): Redlock, built to survive a minority
    // down, could not be used from the CLI while one node was
    const [down1, down2] = (await freePorts(2)) as [number, number];
    // the nodes up have no password; the ones down are given one, which must not be printed
    const urls = (...ports: number[]) =>
      ports.flatMap((p) => ['--url', p > 7005 ? `redis://u:S3cretPw@127.0.0.1:${p}/11` : `redis://127.0.0.1:${p}/11`]);
    const ok = await cli(['run', 'redlock-minority', ...urls(7001, 7002, down1), '--', 'sh', '-c', 'exit 7']);
    expect(ok.code, ok.stderr).toBe(7);
    expect(ok.stderr).toBe(
      `leasehold: warning: redlock: could not connect to redis://***@127.0.0.1:${down1}/11: connect ECONNREFUSED 127.0.0.1:${down1}; going on with 2 of 3 nodes (it rejoins when it answers)\n`,
    );
    const no = await cli(['run', 'redlock-majority', ...urls(7001, down1, down2), '--', 'true']);
    expect(no.code).toBe(69);
    expect(no.stderr).toMatch(/^leasehold: could not connect to redis:\/\/\*\*\*@127\.0\.0\.1:\d+\/11: .*ECONNREFUSED/);
    for (const o of [ok, no]) expect(o.stdout + o.stderr).not.toContain('S3cretPw');
  }, 30_000);
});

describe('a lost lease', () => {
  test('a command that ignores SIGTERM gets SIGKILL after --grace; leasehold exits 79', async () => {
    const mark = dbs.path('started');
    const env = { LEASEHOLD_URL: `sqlite:${dbs.path()}`, MARK: mark };
    const script = 'trap "" TERM; : > "$MARK"; exec sleep 30'; // sleep inherits the ignored SIGTERM
    const holder = start(['run', 'stubborn', '--ttl', '1500ms', '--grace', '1s', '--', 'sh', '-c', script], env);
    await until(() => existsSync(mark), 15_000, 'the command to start');
    const broke = await cli(['release', 'stubborn', '--force'], env);
    expect(broke.code).toBe(0);
    const t0 = performance.now();
    const done = await holder.done;
    const took = performance.now() - t0;
    expect(done.code).toBe(79);
    expect(done.stderr).toMatch(/SIGKILL after 1\.0s/);
    expect(took).toBeGreaterThanOrEqual(1000); // the grace period passed before SIGKILL
    expect(took).toBeLessThan(500 + 1000 + 3000); // a renewal interval, the grace, a loaded machine
  }, 30_000);
});

describe('job control (Ctrl-Z)', () => {
  /** The state letter of /proc/<pid>/stat: T when stopped. */
  const state = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0];

  test('SIGTSTP stops the command with leasehold; SIGCONT continues both; a lease that ran out meanwhile is lost: SIGTERM first, exit 79', async () => {
    // before, the command (its own session: the terminal's SIGTSTP never reaches it) ran on while
    // leasehold was stopped and could not renew: its lease expired, and a second holder ran too
    const db = `sqlite:${dbs.path()}`;
    const log = dbs.path('tstp.log');
    const env = { LEASEHOLD_URL: db, JOB_LOG: log, JOB_MS: '30000' };
    const a = start(['run', 'tstp', '--ttl', '1500ms', '--', process.execPath, JOB], env);
    await until(() => readLog(log).some((l) => l.ev === 'start'), 15_000, 'the command to start');
    const pid = readLog(log)[0]!.pid;
    a.proc.kill('SIGTSTP');
    await until(() => state(a.proc.pid!) === 'T', 5000, 'leasehold to stop');
    await until(() => state(pid) === 'T', 5000, 'the command to stop with it');
    a.proc.kill('SIGCONT');
    await until(() => state(pid) !== 'T' && state(a.proc.pid!) !== 'T', 5000, 'both to continue');
    expect(readLog(log).map((l) => l.ev)).toEqual(['start']); // the lease is still good: it runs on

    // stopped past the TTL: another holder takes the key meanwhile, the command stays stopped
    a.proc.kill('SIGTSTP');
    await until(() => state(pid) === 'T', 5000, 'the command to stop');
    const b = await cli(['run', 'tstp', '--wait', '10s', '--', 'true'], { LEASEHOLD_URL: db });
    expect(b.code, b.stderr).toBe(0);
    expect(state(pid)).toBe('T');
    a.proc.kill('SIGCONT');
    const done = await a.done;
    expect(done.code).toBe(79);
    expect(done.stderr).toMatch(/lost.*stopping the command/);
    expect(readLog(log).map((l) => l.ev)).toEqual(['start', 'term']); // SIGTERM, never its end
  }, 40_000);
});

describe('secrets', () => {
  const SECRET = 's3cret-Pw-4711';
  test('a password in a URL never appears in output or errors', async () => {
    const outputs = [
      await cli(['status', '--url', `redis://user:${SECRET}@127.0.0.1:1/0`]),
      await cli(['status', '--url', `postgres://postgres:${SECRET}@127.0.0.1:1/test`]),
      await cli(['status', '--url', `postgres://postgres:${SECRET}@127.0.0.1:5432/test`]), // trust: it connects
      await cli(['status', '--json'], { LEASEHOLD_URL: `postgres://postgres:${SECRET}@127.0.0.1:5432/test` }),
      await cli(['run', 'k', '--url', `redis://:${SECRET}@127.0.0.1:1`, '--', 'true']),
      await cli(['status', '--url', `redis://:${SECRET}@[::1`]),
      await cli([
        'status',
        '--url',
        `redis://a:${SECRET}@127.0.0.1:6379`,
        '--url',
        `redis://b:${SECRET}@127.0.0.1:7001`,
      ]),
      // a mistyped option: commander quotes it (before, with the password)
      await cli(['status', `--uri=redis://u:${SECRET}@127.0.0.1:1`]),
      await cli(['status', 'extra', `redis://u:${SECRET}@127.0.0.1:1`]),
    ];
    expect(outputs.map((o) => o.code)).toEqual([69, 69, 0, 0, 69, 64, 64, 64, 64]);
    expect(outputs[7]!.stderr).toContain("unknown option '--uri=redis://***@127.0.0.1:1'");
    for (const o of outputs) expect(o.stdout + o.stderr).not.toContain(SECRET);
    expect(outputs[0]!.stderr).toContain('redis://***@127.0.0.1:1/0');
  });
});

describe('secrets with a raw / ? or # in the password', () => {
  test('etcd:// and zk:// URLs: no part of the password in any output', async () => {
    // before, the authority was cut at the first `/`: `bad member "root:S3c"` (etcd) and
    // `the port of "root:S3c" must be …` (zk) quoted the password's first part
    const [closed] = (await freePorts(1)) as [number];
    for (const sep of ['/', '?', '#']) {
      const pw = `S3c${sep}retPw`;
      const etcd = await cli(['run', 'k', '--url', `etcd://root:${pw}@127.0.0.1:${closed}`, '--', 'true']);
      expect(etcd.code, etcd.stderr).toBe(69);
      expect(etcd.stderr).toMatch(
        new RegExp(`^leasehold: could not connect to etcd://\\*\\*\\*@127\\.0\\.0\\.1:${closed}`),
      );
      const zk = await cli(['run', 'k', '--url', `zk://root:${pw}@127.0.0.1:2181`, '--', 'true']);
      expect(zk.code, zk.stderr).toBe(64);
      expect(zk.stderr).toBe('leasehold: fromUrl: zk:// URLs take no user or password\n');
      for (const o of [etcd, zk]) {
        expect(o.stdout + o.stderr).not.toContain('S3c');
        expect(o.stdout + o.stderr).not.toContain('retPw');
      }
    }
  }, 60_000);
});

describe('secrets in command-line parse errors', () => {
  test.each([
    [['redis://u:S3c/retPw@h:6379'], "unknown command 'redis://***@h:6379'"],
    [['redis://u:S3c@retPw@h'], "unknown command 'redis://***@h'"],
    [['run', 'k', '--ulr=postgres://h/db?password=S3cretPw'], "unknown option '--ulr=postgres://h/db?password=***'"],
  ])('%j: exit 64, no part of the password', async (args, message) => {
    // before, the CLI's own pattern stopped at the first `/` or `@`: the rest was printed
    const r = await cli(args);
    expect(r.code).toBe(64);
    expect(r.stderr).toContain(message);
    expect(r.stdout + r.stderr).not.toMatch(/S3c|retPw/);
  });
});

describe('elect', () => {
  test('only the leader runs the command; when it stops, another candidate takes over with a higher fence', async () => {
    const db = dbs.path();
    const log = dbs.path('elect.log');
    const env = (tag: string) => ({ LEASEHOLD_URL: `sqlite:${db}`, JOB_LOG: log, JOB_MS: '30000', JOB_TAG: tag });
    const a = start(['elect', 'scheduler', '--value', 'a', '--ttl', '2s', '--', process.execPath, JOB], env('a'));
    await until(() => readLog(log).some((l) => l.ev === 'start'), 15_000, 'a to lead');
    const b = start(['elect', 'scheduler', '--value', 'b', '--ttl', '2s', '--', process.execPath, JOB], env('b'));
    const status = await cli(['status', 'election:', '--json'], { LEASEHOLD_URL: `sqlite:${db}` });
    expect(JSON.parse(status.stdout)).toMatchObject([{ key: 'election:scheduler', value: 'a' }]);
    await new Promise((r) => setTimeout(r, 500));
    expect(
      readLog(log)
        .filter((l) => l.ev === 'start')
        .map((l) => l.tag),
    ).toEqual(['a']); // b waits
    a.proc.kill('SIGTERM'); // a's command stops, a resigns
    expect((await a.done).code).toBe(143);
    await until(() => readLog(log).some((l) => l.ev === 'start' && l.tag === 'b'), 10_000, 'b to lead');
    const starts = readLog(log).filter((l) => l.ev === 'start');
    expect(starts.map((l) => l.leader)).toEqual(['a', 'b']);
    expect(BigInt(starts[1]!.fence!) > BigInt(starts[0]!.fence!)).toBe(true);
    expect(starts[1]!.key).toBe('election:scheduler');
    // broken from outside: b is demoted, its command stopped, and it campaigns again
    const broke = await cli(['release', 'election:scheduler', '--force'], { LEASEHOLD_URL: `sqlite:${db}` });
    expect(broke.code).toBe(0);
    await until(() => readLog(log).filter((l) => l.ev === 'start').length === 3, 10_000, 'b to lead again');
    const lines = readLog(log);
    expect(lines.filter((l) => l.ev === 'term' && l.tag === 'b')).toHaveLength(1);
    b.proc.kill('SIGTERM');
    expect((await b.done).code).toBe(143);
  }, 60_000);
});

describe('elect with a ttl that leaves no validity', () => {
  test('--ttl 1ms is a usage error: exit 64 at once, the command never runs', async () => {
    // before, every term was lost by the time it was granted, and the candidate campaigned on
    // until stopped; now the ttl is refused before any I/O
    const db = dbs.path();
    const log = dbs.path('elect-lost.log');
    const env = { LEASEHOLD_URL: `sqlite:${db}`, JOB_LOG: log, JOB_MS: '300' };
    const done = await start(['elect', 'lapsing', '--ttl', '1ms', '--', process.execPath, JOB], env).done;
    expect(done.code, done.stderr).toBe(64);
    expect(readLog(log)).toEqual([]);
    expect(done.stderr).not.toMatch(/leading "lapsing"/);
    expect(done.stderr).toMatch(/a ttl of 1ms leaves no validity after the drift allowance/);
  }, 60_000);
});

describe('demo', () => {
  test('a full run: the stale write is rejected, and fences read from 1 with the file’s real base said once', async () => {
    // a new SQLite file's fences start above the time in µs: the timeline would read
    // "fence 1796449546507713"; it shows them from 1 and says what they are
    const { db: _db, ...env } = home();
    const done = await start(['demo'], env).done;
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toMatch(/● granted, fence 1\n/);
    expect(done.stdout).toMatch(/late write with fence \d REJECTED by the resource \(it has seen fence \d\)/);
    const base = /Fences are shown from 1: fence n is (\d+) \+ n\./.exec(done.stdout);
    expect(base, done.stdout).not.toBeNull();
    expect(BigInt(base![1]!)).toBeGreaterThan(1_000_000_000_000_000n); // µs since 1970
    expect(done.stdout).toMatch(/Fences rose with every grant \(1 → 2 → 3/);
  }, 60_000);

  test.each([
    ['SIGTERM', 143],
    ['SIGHUP', 129],
    ['SIGINT', 130],
  ] as const)(
    '%s while a worker is paused: every worker ends, the temporary directory goes, exit %i',
    async (signal, code) => {
      // before, SIGTERM and SIGHUP left the SIGSTOPped worker and /tmp/leasehold-demo-*, and
      // SIGINT exited 70 ("demo failed: ada exited with null")
      const { db: _db, ...env } = home();
      const tmp = mkdtempSync(join(dirname(dbs.path()), 'tmp-'));
      const demo = start(['demo', '--ttl', '2s'], { ...env, TMPDIR: tmp });
      const pid = demo.proc.pid!;
      const children = () => {
        try {
          return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
            .trim()
            .split(/\s+/)
            .filter(Boolean)
            .map(Number);
        } catch {
          return [];
        }
      };
      const state = (p: number) => {
        try {
          return readFileSync(`/proc/${p}/stat`, 'utf8').replace(/^.*\) /s, '')[0];
        } catch {
          return 'gone';
        }
      };
      let workers: number[] = [];
      await until(() => (workers = children()).some((p) => state(p) === 'T'), 20_000, 'a worker to be paused');
      expect(readdirSync(tmp)).toHaveLength(1); // leasehold-demo-*
      demo.proc.kill(signal);
      const done = await demo.done;
      expect(done.code, done.stderr).toBe(code);
      await until(() => workers.every((p) => ['gone', 'Z'].includes(state(p)!)), 5000, 'every worker to end');
      expect(readdirSync(tmp)).toEqual([]);
    },
    40_000,
  );

  test('runs with no server, ends with exit 0, and shows the stale write rejected', async () => {
    const { db, ...env } = home();
    const r = await cli(['demo'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/embedded SQLite backend, no server/);
    expect(r.stdout).toMatch(/⏸ paused \(SIGSTOP\)/);
    expect(r.stdout).toMatch(/late write with fence (\d+) REJECTED by the resource \(it has seen fence (\d+)\)/);
    const [, stale, seen] = /fence (\d+) REJECTED by the resource \(it has seen fence (\d+)\)/.exec(r.stdout)!;
    expect(BigInt(seen!) > BigInt(stale!)).toBe(true);
    expect(r.stdout).not.toContain('\u001b['); // NO_COLOR
    expect(existsSync(db)).toBe(false); // a temporary file, not the user's database
  }, 60_000);
});
