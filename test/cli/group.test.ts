/**
 * What a command leaves behind: processes it started in its process group (`cmd &`) must not run
 * on once leasehold has released the lock — the next holder would run next to them.
 */
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { TempDbs } from '../support/sqlite.js';
import { cli, ensureBuilt, killAll } from './helpers.js';

const dbs = new TempDbs();
const leftovers: number[] = [];
beforeAll(() => ensureBuilt(), 180_000);
afterEach(() => {
  killAll();
  for (const pid of leftovers.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
});
afterAll(() => dbs.cleanup());

/** Running (a zombie is not: this machine's PID 1 reaps orphans late, or never). */
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // /proc/<pid>/stat: "pid (comm) S ..." — the state follows the last ")"
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return true;
  }
};

test('a background process the command left in its group is stopped before the lock is released', async () => {
  const url = `sqlite:${dbs.path()}`;
  const pidFile = dbs.path('bg-pid');
  // the command starts a background job (same process group, its output elsewhere) and exits 3 at once
  const script = 'sleep 60 >/dev/null 2>&1 & echo $! > "$PID_FILE"; exit 3';
  const r = await cli(['run', 'bg', '--grace', '2s', '--', 'sh', '-c', script], {
    LEASEHOLD_URL: url,
    PID_FILE: pidFile,
  });
  expect(r.code, r.stderr).toBe(3);
  expect(existsSync(pidFile)).toBe(true);
  const bg = Number(readFileSync(pidFile, 'utf8').trim());
  leftovers.push(bg);
  // leasehold has exited and released the lock: nothing the command started may still run
  expect(alive(bg)).toBe(false);
  expect(r.stderr).toContain('left');
}, 30_000);

test('a leftover that ignores SIGTERM is killed after --grace, and still before the release', async () => {
  const url = `sqlite:${dbs.path()}`;
  const pidFile = dbs.path('bg-pid2');
  const script = `sh -c 'trap "" TERM; echo $$ > "$PID_FILE"; while :; do sleep 1; done' >/dev/null 2>&1 & while [ ! -s "$PID_FILE" ]; do :; done; exit 0`;
  const t0 = performance.now();
  const r = await cli(['run', 'bg2', '--grace', '500ms', '--', 'sh', '-c', script], {
    LEASEHOLD_URL: url,
    PID_FILE: pidFile,
  });
  expect(r.code, r.stderr).toBe(0);
  const bg = Number(readFileSync(pidFile, 'utf8').trim());
  leftovers.push(bg);
  expect(alive(bg)).toBe(false);
  expect(performance.now() - t0).toBeLessThan(15_000);
}, 30_000);
