/**
 * A leasehold that is stopped (SIGSTOP: uncatchable — a debugger, a stuck cgroup freeze, an
 * operator's `kill -STOP`) renews nothing; its lease runs out and the next holder starts. The
 * command, in its own process group, is not stopped with it: the watchdog must stop it when the
 * lease it last heard of runs out.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { TempDbs } from '../support/sqlite.js';
import { cli, ensureBuilt, JOB, killAll, readLog, start, until } from './helpers.js';

const dbs = new TempDbs();
beforeAll(() => ensureBuilt(), 180_000);
afterEach(() => killAll());
afterAll(() => dbs.cleanup());

test('SIGSTOP of leasehold: the command is stopped when the lease runs out, before the next holder starts; SIGCONT then exits 79', async () => {
  const env = { LEASEHOLD_URL: `sqlite:${dbs.path()}` };
  const log = join(dbs.path('log'));
  const holder = start(['run', 'paused', '--ttl', '1500ms', '--grace', '500ms', '--', process.execPath, JOB], {
    ...env,
    JOB_LOG: log,
    JOB_MS: '30000',
    JOB_TAG: 'first',
  });
  await until(() => readLog(log).some((l) => l.ev === 'start'), 15_000, 'the holder to start');
  holder.proc.kill('SIGSTOP');
  try {
    const next = await cli(['run', 'paused', '--wait', '15s', '--', process.execPath, JOB], {
      ...env,
      JOB_LOG: log,
      JOB_MS: '50',
      JOB_TAG: 'next',
    });
    expect(next.code, next.stderr).toBe(0);
    const lines = readLog(log);
    const nextStart = lines.find((l) => l.tag === 'next' && l.ev === 'start')!;
    const firstTerm = lines.find((l) => l.tag === 'first' && l.ev === 'term');
    // before, the first command ran on next to the next holder's, for as long as leasehold stayed stopped
    expect(firstTerm, JSON.stringify(lines)).toBeDefined();
    expect(firstTerm!.t).toBeLessThan(nextStart.t);
  } finally {
    holder.proc.kill('SIGCONT');
  }
  const r = await holder.done;
  expect(r.code, r.stderr).toBe(79);
}, 60_000);
