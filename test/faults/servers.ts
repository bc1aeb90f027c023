/**
 * Lock servers the harness owns: redis-server processes on free ports the OS hands out (loopback only), which the
 * nemeses may SIGSTOP, SIGKILL and restart. The shared servers (6379, 7001..7005, Postgres) are
 * never touched. Each server runs under a tiny shell guard that SIGKILLs it when the harness's
 * pipe closes, so a crashed or killed harness leaves no server behind; `killAllServers()` also
 * runs on exit.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../support/ports.js';
import { sleep } from './types.js';

/** One PING over a raw socket; resolves true on +PONG. */
export function ping(port: number, timeoutMs = 300): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port });
    const t = setTimeout(() => done(false), timeoutMs);
    const done = (ok: boolean) => {
      clearTimeout(t);
      s.destroy();
      resolve(ok);
    };
    s.on('connect', () => s.write('PING\r\n'));
    s.on('data', (d) => done(d.toString().startsWith('+PONG')));
    s.on('error', () => done(false));
  });
}

/** True if nothing listens on `port` (a refused connection). */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port });
    s.on('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.on('error', () => resolve(true));
  });
}

/** Ports come from the OS (listen on port 0), never a fixed range another run may hold. */
export { freePort };

const LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
const live = new Set<RedisServer>();

export interface ServerOptions {
  /** AOF with fsync on every write: the fence counter (and the locks) survive a SIGKILL. */
  persist?: boolean;
  /** Run under libfaketime, with the offset read from a file the harness rewrites (clock jumps). */
  faketime?: boolean;
  /** How long to wait for the first PONG (default 5s). */
  startTimeoutMs?: number;
}

export class RedisServer {
  private guard: ChildProcess | null = null;
  /** Pid of the redis-server process itself (the guard's child). */
  pid = 0;
  stopped = false;
  readonly dir = mkdtempSync(join(tmpdir(), 'leasehold-faults-'));
  private readonly timeFile = join(this.dir, 'faketime');

  constructor(
    readonly port: number,
    readonly options: ServerOptions = {},
  ) {}

  get up(): boolean {
    return this.guard !== null;
  }

  async start(): Promise<void> {
    if (this.guard) return;
    if (!(await portFree(this.port))) throw new Error(`port ${this.port} is already in use`);
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--dir', this.dir];
    args.push(...(this.options.persist ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no']));
    const env: NodeJS.ProcessEnv = { ...process.env };
    if (this.options.faketime) {
      if (!existsSync(this.timeFile)) writeFileSync(this.timeFile, '+0\n');
      Object.assign(env, { LD_PRELOAD: LIBFAKETIME, FAKETIME_TIMESTAMP_FILE: this.timeFile, FAKETIME_NO_CACHE: '1' });
    }
    // the guard: start redis-server, print its pid, SIGKILL it when our pipe closes
    const guard = spawn(
      'sh',
      ['-c', 'redis-server "$@" >/dev/null 2>&1 & echo $!; read _; kill -9 $! 2>/dev/null', 'sh', ...args],
      {
        stdio: ['pipe', 'pipe', 'ignore'],
        env,
      },
    );
    this.guard = guard;
    live.add(this);
    this.pid = await new Promise<number>((resolve, reject) => {
      guard.stdout!.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
      guard.once('error', reject);
    });
    this.stopped = false;
    const until = performance.now() + (this.options.startTimeoutMs ?? 5000);
    while (performance.now() < until) {
      if (await ping(this.port, 200)) return;
      await sleep(30);
    }
    await this.kill();
    throw new Error(`redis-server on ${this.port} did not answer PING`);
  }

  /** SIGSTOP: the server is frozen; connections stay open, commands wait in its socket buffers. */
  stop(): void {
    if (this.pid && this.guard) process.kill(this.pid, 'SIGSTOP');
    this.stopped = true;
  }

  cont(): void {
    if (this.pid && this.guard) process.kill(this.pid, 'SIGCONT');
    this.stopped = false;
  }

  /** SIGKILL: gone, with every connection. */
  async kill(): Promise<void> {
    const g = this.guard;
    if (!g) return;
    this.guard = null;
    live.delete(this);
    const pid = this.pid;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
    const exited = new Promise((r) => g.once('exit', r));
    g.stdin!.end();
    await Promise.race([exited, sleep(2000)]);
    this.stopped = false;
    for (let i = 0; i < 100 && !(await portFree(this.port)); i++) await sleep(20);
  }

  /** Deletes the persisted data: the next start is empty (a restart without persistence). */
  wipe(): void {
    for (const f of ['appendonlydir', 'dump.rdb']) rmSync(join(this.dir, f), { recursive: true, force: true });
  }

  /** Moves this server's clock by `offset` (libfaketime syntax, e.g. '+30s'); needs `faketime`. */
  setClock(offset: string): void {
    writeFileSync(this.timeFile, `${offset}\n`);
  }

  /** Running and not stopped. */
  async heal(): Promise<void> {
    if (this.stopped) this.cont();
    if (!this.guard) await this.start();
  }

  async destroy(): Promise<void> {
    if (this.stopped) this.cont();
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function killAllServers(): void {
  for (const s of live) {
    try {
      process.kill(s.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  live.clear();
}
process.on('exit', killAllServers);

export function haveRedisServer(): boolean {
  return !spawnSync('redis-server', ['--version']).error;
}

/**
 * Whether redis-server runs under libfaketime here. Debian's redis-server 7.0 (linked with
 * jemalloc 5.3) does not: libfaketime's initialisation recurses through jemalloc into
 * clock_gettime() and the server hangs before it listens. The clock-jump scenario is skipped
 * with this reason then (and runs wherever the probe passes).
 */
let probed: Promise<{ ok: boolean; reason: string }> | null = null;
export function faketimeWorks(): Promise<{ ok: boolean; reason: string }> {
  probed ??= probeFaketime();
  return probed;
}

async function probeFaketime(): Promise<{ ok: boolean; reason: string }> {
  if (!existsSync(LIBFAKETIME)) {
    return { ok: false, reason: 'libfaketime is not installed (apt-get install -y faketime)' };
  }
  const s = new RedisServer(await freePort(), { faketime: true, startTimeoutMs: 1500 });
  try {
    await s.start();
    s.setClock('+10s');
    await sleep(50);
    return { ok: true, reason: 'redis-server runs under libfaketime' };
  } catch {
    return {
      ok: false,
      reason:
        'redis-server does not start under libfaketime on this machine (jemalloc calls clock_gettime() ' +
        "while libfaketime initialises: 'Cannot recover from unexpected recursive calls to clock_gettime()')",
    };
  } finally {
    await s.destroy();
  }
}
