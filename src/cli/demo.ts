/**
 * `leasehold demo`: several worker processes contend for one lock on the embedded SQLite backend
 * (a fresh temporary file, no server). One is paused with SIGSTOP while it holds the lock, past
 * its TTL; the next holder gets a higher fence; the paused worker resumes and sends its late
 * write, and the fenced resource (here, in this process) rejects it. Prints the timeline.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import { FenceGate, StaleFenceError } from '../index.js';
import { CliError, duration, EXIT, openBackend, palette } from './common.js';
import { monotonicMs, type DemoEvent, type ToParent, type ToWorker } from './demo-worker.js';
import { renderTimeline, type NemesisEvent } from './timeline.js';

const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
const NAMES = ['ada', 'bob', 'cy', 'dee', 'eve', 'fay', 'gus', 'hal'];

export interface DemoFlags {
  workers: string;
  ttl: string;
  color?: boolean;
}

export async function demo(flags: DemoFlags): Promise<number> {
  const n = Number(flags.workers);
  if (!Number.isInteger(n) || n < 2 || n > NAMES.length)
    throw new CliError(`--workers must be 2..${NAMES.length}`, EXIT.USAGE);
  const ttlMs = duration(flags.ttl, '--ttl');
  if (ttlMs < 300 || ttlMs > 10_000) throw new CliError('--ttl must be between 300ms and 10s for the demo', EXIT.USAGE);
  const p = palette(process.stdout, flags.color !== false);
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-demo-'));
  const db = join(dir, 'locks.db');
  const names = NAMES.slice(0, n);
  const work = Math.round(ttlMs / 4);
  const out = (s = '') => process.stdout.write(s + '\n');
  // the backend once here, before any worker: a missing or unbuilt better-sqlite3 is one line and
  // exit 69 (as `leasehold run`), not the same error from every worker and an empty timeline
  try {
    const { backend } = await openBackend({ url: [`sqlite:${db}`], prefix: 'demo' });
    await backend.close();
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }

  out(p.bold(`leasehold demo — ${n} worker processes, one lock ("report"), TTL ${ttlMs} ms`));
  out(p.dim(`embedded SQLite backend, no server: ${db}`));
  out(p.dim(`Each worker: take the lock → work ${work} ms → write the report with its fence → release (2 jobs).`));
  out(
    p.dim(
      `The second holder is paused with SIGSTOP mid-work, until its lease has run out and another worker took over.`,
    ),
  );
  out();

  const gate = new FenceGate(); // the protected resource: it accepts a fence ≥ the highest it has seen
  const events: (DemoEvent | NemesisEvent)[] = [];
  const procs = new Map<string, ChildProcess>();
  let grants = 0;
  let victim: { worker: string; fence: bigint } | null = null;
  let resumed = false;
  const failures: string[] = [];

  const pause = (worker: string, fence: bigint) => {
    victim = { worker, fence };
    setTimeout(
      () => {
        const proc = procs.get(worker);
        if (!proc?.pid || proc.exitCode !== null) return;
        process.kill(proc.pid, 'SIGSTOP');
        events.push({ t: monotonicMs(), worker, what: 'paused' });
        // resume once another worker holds a higher fence and wrote with it (or after 4 TTLs)
        const deadline = setTimeout(resume, ttlMs * 4);
        const poll = setInterval(() => {
          if (events.some((e) => e.what === 'accepted' && e.worker !== worker && BigInt(e.fence!) > fence)) resume();
        }, 20);
        function resume() {
          clearTimeout(deadline);
          clearInterval(poll);
          if (resumed) return;
          resumed = true;
          setTimeout(() => {
            events.push({ t: monotonicMs(), worker, what: 'resumed' });
            if (proc?.pid && proc.exitCode === null) process.kill(proc.pid, 'SIGCONT');
          }, 150);
        }
      },
      Math.round(work / 3),
    );
  };

  const exits = names.map((name) => {
    const proc = spawn(
      process.execPath,
      [...process.execArgv, process.argv[1]!, 'demo-worker', db, name, String(ttlMs), '2', String(work)],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
    );
    procs.set(name, proc);
    proc.on('message', (m: ToParent) => {
      if (m.type === 'write') {
        let reply: ToWorker;
        try {
          gate.check('report', BigInt(m.fence));
          reply = { type: 'write-result', id: m.id, ok: true, highest: m.fence };
        } catch (e) {
          if (!(e instanceof StaleFenceError)) throw e;
          reply = { type: 'write-result', id: m.id, ok: false, highest: String(e.highest) };
        }
        proc.send(reply);
        return;
      }
      events.push(m);
      if (m.what === 'failed') failures.push(`${m.worker}: ${m.detail}`);
      if (m.what === 'granted' && ++grants === 2) pause(m.worker, BigInt(m.fence!));
    });
    return new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  });
  const stopAll = () => {
    for (const proc of procs.values()) {
      if (proc.pid && proc.exitCode === null) {
        try {
          process.kill(proc.pid, 'SIGCONT');
          process.kill(proc.pid, 'SIGKILL');
        } catch {
          /* gone */
        }
      }
    }
  };
  // interrupted (Ctrl-C, a kill, a closed terminal): no worker is left behind — a paused one
  // is continued so its SIGKILL lands — nor the temporary directory; exit 128 + n, as a shell
  const interrupted = (signal: NodeJS.Signals) => {
    stopAll();
    rmSync(dir, { recursive: true, force: true });
    process.exit(128 + (constants.signals[signal] ?? 0));
  };
  for (const s of STOP_SIGNALS) process.once(s, interrupted);
  const timeout = setTimeout(() => {
    failures.push('the demo did not finish within 60 s');
    stopAll();
  }, 60_000);
  try {
    const codes = await Promise.all(exits);
    codes.forEach((c, i) => c !== 0 && failures.push(`${names[i]} exited with ${c}`));
  } finally {
    clearTimeout(timeout);
    for (const s of STOP_SIGNALS) process.off(s, interrupted);
    rmSync(dir, { recursive: true, force: true });
  }

  const rejected = events.filter((e): e is DemoEvent => e.what === 'rejected');
  const granted = events.filter((e): e is DemoEvent => e.what === 'granted').sort((a, b) => a.t - b.t);
  // a new SQLite file's fences start above the time in µs (docs/sqlite.md): shown from 1 here
  const base = granted.length > 0 ? BigInt(granted[0]!.fence!) - 1n : 0n;
  const fence = (f: string | bigint | undefined) => (f === undefined ? '?' : String(BigInt(f) - base));
  if (events.length > 0) {
    out(renderTimeline(events, names, p, Math.min(...events.map((e) => e.t)), fence));
    out();
    if (base > 0n) {
      out(p.dim(`  Fences are shown from 1: fence n is ${base} + n. A new lock file's fences start above the time`));
      out(
        p.dim(
          '  in microseconds, so a file deleted and made again starts above its old fences (docs/sqlite.md says when).',
        ),
      );
      out();
    }
  }
  const increasing = granted.every((e, i) => i === 0 || BigInt(e.fence!) > BigInt(granted[i - 1]!.fence!));
  const v = victim as { worker: string; fence: bigint } | null;
  if (failures.length > 0) throw new CliError(`demo failed: ${failures.join('; ')}`, EXIT.SOFTWARE);
  if (!v || rejected.length === 0 || !increasing) {
    throw new CliError(
      'demo: the paused worker’s late write was not rejected (the machine may be overloaded); run it again',
      EXIT.SOFTWARE,
    );
  }
  const next = granted.find((e) => BigInt(e.fence!) > v.fence && e.worker !== v.worker);
  out(p.bold('What happened'));
  out(
    `  ${v.worker} held the lock with fence ${fence(v.fence)} and was paused past its ${ttlMs} ms TTL: it could not renew,`,
  );
  out(
    `  and it could not know. The lock expired; ${next?.worker ?? 'another worker'} took it with fence ${fence(next?.fence)} and wrote.`,
  );
  out(
    `  When ${v.worker} resumed, its late write carried fence ${fence(v.fence)}: the resource had seen ${fence(rejected[0]!.detail)}, so it`,
  );
  out(
    `  ${p.red('rejected the stale write')}. Fences rose with every grant (${granted.map((g) => fence(g.fence)).join(' → ')}).`,
  );
  out(p.dim('  A lock alone cannot stop a paused holder. The fence, checked where the write lands, can.'));
  return EXIT.OK;
}
