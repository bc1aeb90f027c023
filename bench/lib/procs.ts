/**
 * Processes the bench owns: extra redis-server instances (on free ports) and forked
 * workers. Everything started here is registered and killed on exit — normal, thrown, or on
 * SIGINT/SIGTERM — and, when started by a section that runs past its time budget, when that
 * section is stopped (scope.ts). A leftover server from an earlier crashed run is recognised by its pidfile
 * and command line and removed; a port held by anything else is never touched.
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { currentScope } from './scope.js';
import { sleep } from './stats.js';

const STATE = join(tmpdir(), 'leasehold-bench');
const owned = new Set<ChildProcess>();
const hooks: Array<() => Promise<void>> = [];
let installed = false;

/** Kills every owned process now (synchronous: safe in an 'exit' handler). */
function killAllSync(): void {
  for (const p of owned) {
    if (p.exitCode !== null || p.signalCode !== null || p.pid === undefined) continue;
    try {
      process.kill(p.pid, 'SIGCONT'); // a stopped process must be resumed to die cleanly
    } catch {
      /* gone */
    }
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}

/** Installs exit and signal handlers once. */
export function installCleanup(): void {
  if (installed) return;
  installed = true;
  process.on('exit', killAllSync);
  const onSignal = (sig: NodeJS.Signals) => {
    process.stderr.write(`\n[bench] ${sig}: cleaning up\n`);
    void runCleanup().finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
}

/** Registers an async cleanup step (closing clients, deleting keys), run by runCleanup. */
export function onCleanup(fn: () => Promise<void>): void {
  hooks.push(fn);
}

export async function runCleanup(): Promise<void> {
  for (const fn of hooks.splice(0).reverse()) {
    await Promise.race([fn().catch(() => {}), sleep(3000)]);
  }
  killAllSync();
}

function track(p: ChildProcess): ChildProcess {
  owned.add(p);
  p.once('exit', () => owned.delete(p));
  // killed with its section when that one runs past its budget (scope.ts)
  currentScope()?.adopt(p);
  return p;
}

/** Forks a TypeScript module (run through tsx) with an IPC channel. */
export function forkTs(modulePath: string, args: string[] = [], extraExecArgv: string[] = []): ChildProcess {
  return track(
    fork(modulePath, args, {
      execArgv: ['--import', 'tsx', ...extraExecArgv],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, NODE_OPTIONS: '' },
    }),
  );
}

/** Waits for a process to exit, killing it after `graceMs`. */
export async function stopChild(p: ChildProcess, graceMs = 2000): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  if (p.connected) p.disconnect();
  await Promise.race([exited, sleep(graceMs)]);
  if (p.exitCode === null && p.signalCode === null) {
    p.kill('SIGKILL');
    await Promise.race([exited, sleep(1000)]);
  }
}

/** One PING over a raw socket; true on +PONG. */
export function ping(port: number, timeoutMs = 300): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      clearTimeout(t);
      s.destroy();
      resolve(ok);
    };
    const t = setTimeout(() => done(false), timeoutMs);
    s.on('connect', () => s.write('PING\r\n'));
    s.on('data', (d) => done(d.toString().startsWith('+PONG')));
    s.on('error', () => done(false));
  });
}

function pidfile(port: number): string {
  return join(STATE, `redis-${port}.pid`);
}

/** Removes a redis-server that an earlier, crashed bench run left on `port` (ours only). */
function reapLeftover(port: number): void {
  const f = pidfile(port);
  if (!existsSync(f)) return;
  const pid = Number(readFileSync(f, 'utf8').trim());
  try {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
    if (Number.isInteger(pid) && pid > 1 && cmd.includes('redis-server') && cmd.includes(`${port}`)) {
      process.kill(pid, 'SIGCONT');
      process.kill(pid, 'SIGKILL');
    }
  } catch {
    /* not running */
  }
  unlinkSync(f);
}

/** A redis-server owned by the bench (loopback only, no persistence). */
export class RedisServer {
  private proc: ChildProcess | null = null;
  private dir: string | null = null;
  constructor(readonly port: number) {}

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  async start(): Promise<void> {
    mkdirSync(STATE, { recursive: true });
    reapLeftover(this.port);
    for (let i = 0; i < 10 && (await ping(this.port)); i++) await sleep(100);
    if (await ping(this.port)) throw new Error(`port ${this.port} is in use by a server the bench does not own`);
    this.dir = mkdtempSync(join(STATE, `redis-${this.port}-`));
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    const proc = track(spawn('redis-server', [...args, '--dir', this.dir], { stdio: 'ignore' }));
    this.proc = proc;
    writeFileSync(pidfile(this.port), String(proc.pid));
    const failed = new Promise<never>((_, reject) => proc.once('error', reject));
    const up = (async () => {
      for (let i = 0; i < 100; i++) {
        if (await ping(this.port)) return;
        if (proc.exitCode !== null) throw new Error(`redis-server on ${this.port} exited (${proc.exitCode})`);
        await sleep(50);
      }
      throw new Error(`redis-server on ${this.port} did not come up`);
    })();
    await Promise.race([failed, up]);
  }

  /** SIGSTOP: the process keeps its sockets open but answers nothing. */
  pause(): void {
    if (this.proc?.pid) process.kill(this.proc.pid, 'SIGSTOP');
  }

  resume(): void {
    if (this.proc?.pid) process.kill(this.proc.pid, 'SIGCONT');
  }

  async stop(): Promise<void> {
    const p = this.proc;
    this.proc = null;
    if (p && p.exitCode === null && p.signalCode === null) {
      const exited = new Promise<void>((r) => p.once('exit', () => r()));
      try {
        process.kill(p.pid!, 'SIGCONT');
      } catch {
        /* gone */
      }
      p.kill('SIGKILL');
      await Promise.race([exited, sleep(2000)]);
    }
    try {
      unlinkSync(pidfile(this.port));
    } catch {
      /* already gone */
    }
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.dir = null;
  }
}
