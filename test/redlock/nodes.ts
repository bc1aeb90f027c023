/**
 * Test helpers: real redis-server processes the test owns (to kill, SIGSTOP, restart), and
 * clients for the shared nodes on 7001..7005. No mocks: every node is a real server.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import type { NodeRedisLike } from '../../src/backends/redis/index.js';

export const SHARED_PORTS = [7001, 7002, 7003, 7004, 7005];

/** One PING over a raw socket; resolves true on +PONG. */
export function ping(port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port });
    const t = setTimeout(() => done(false), timeoutMs);
    const done = (ok: boolean) => {
      clearTimeout(t);
      s.destroy();
      resolve(ok);
    };
    s.on('connect', () => s.write('PING\r\n'));
    s.on('data', (d) => done(/^(\+PONG|-NOAUTH)/.test(d.toString()))); // up, maybe password-protected
    s.on('error', () => done(false));
  });
}

/** Fails (never skips) when a shared node is down. */
export async function requireShared(ports = SHARED_PORTS): Promise<void> {
  const down: number[] = [];
  for (const p of ports) if (!(await ping(p))) down.push(p);
  if (down.length) throw new Error(`redis not answering on ${down.join(', ')}: run \`bash scripts/services.sh\``);
}

/** Polls `check` until it is true; throws after `timeoutMs`. For waiting on a state, not on time. */
export async function eventually(check: () => Promise<boolean> | boolean, timeoutMs = 5000, what = 'condition') {
  const end = performance.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * A redis-server process owned by the test. It runs under a small shell that kills it (-9) when
 * its stdin closes, so a test process that dies, or a hook that times out, leaves no orphan.
 */
export class Node {
  private shell: ChildProcess | null = null;
  private redisPid: number | null = null;
  private readonly dir = mkdtempSync(join(tmpdir(), 'leasehold-redlock-'));
  constructor(readonly port: number) {}

  async start(extra: readonly string[] = []): Promise<void> {
    if (await ping(this.port, 200)) throw new Error(`port ${this.port} is already in use`);
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    const script = 'redis-server "$@" >/dev/null 2>&1 & echo $!; read _; kill -9 $! 2>/dev/null; wait $!';
    const shell = spawn('sh', ['-c', script, 'sh', ...args, ...extra, '--dir', this.dir], {
      stdio: ['pipe', 'pipe', 'ignore'],
    });
    this.shell = shell;
    this.redisPid = await new Promise<number>((resolve, reject) => {
      shell.once('error', reject);
      shell.stdout!.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
    });
    await eventually(() => ping(this.port, 200), 10_000, `redis-server on ${this.port}`);
  }

  /** SIGKILL: the process and everything it held are gone. */
  async kill(): Promise<void> {
    const sh = this.shell;
    this.shell = null;
    this.redisPid = null;
    if (!sh || sh.exitCode !== null) return;
    const exited = new Promise((r) => sh.once('exit', r));
    sh.stdin!.end(); // the shell kills redis-server -9 and waits for it
    await exited;
  }

  /** Kill, then start again on the same port: a restart without persistence, i.e. empty. */
  async restartEmpty(extra: readonly string[] = []): Promise<void> {
    await this.kill();
    await this.start(extra);
  }

  /** Running and not stopped (after a test that killed or SIGSTOPped it). */
  async ensureUp(): Promise<void> {
    this.cont();
    if (!this.shell) await this.start();
  }

  private signal(sig: NodeJS.Signals): void {
    if (this.redisPid !== null) process.kill(this.redisPid, sig);
  }

  stop(): void {
    this.signal('SIGSTOP');
  }

  cont(): void {
    this.signal('SIGCONT');
  }

  async destroy(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Starts `ports.length` owned nodes; fails clearly when redis-server is missing. */
export async function startNodes(ports: readonly number[]): Promise<Node[]> {
  if (spawnSync('redis-server', ['--version']).error) {
    throw new Error('redis-server is not installed: run `bash scripts/services.sh`');
  }
  const nodes = ports.map((p) => new Node(p));
  try {
    await Promise.all(nodes.map((n) => n.start()));
  } catch (e) {
    await Promise.all(nodes.map((n) => n.destroy()));
    throw e;
  }
  return nodes;
}

export type Kind = 'ioredis' | 'node-redis';
/** The part of a node-redis client the tests use (its generic type differs per createClient call). */
export interface NodeRedisClient extends NodeRedisLike {
  readonly isOpen: boolean;
  sendCommand(args: string[]): Promise<unknown>;
  destroy(): void;
}
export type AnyClient = Redis | NodeRedisClient;

/** Connected clients, one per port, with error listeners (a dead node must not crash the test). */
export async function clients(kind: Kind, ports: readonly number[]): Promise<AnyClient[]> {
  if (kind === 'ioredis') {
    const cs = ports.map((port) => {
      const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => 50 });
      c.on('error', () => {});
      return c;
    });
    await Promise.all(cs.map((c) => c.connect()));
    return cs;
  }
  const cs = ports.map((port) => {
    const c = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: () => 50 } });
    c.on('error', () => {});
    return c;
  });
  await Promise.all(cs.map((c) => c.connect()));
  return cs as unknown as NodeRedisClient[];
}

export async function closeClients(cs: readonly AnyClient[]): Promise<void> {
  for (const c of cs) {
    if (c instanceof Redis) c.disconnect();
    else if (c.isOpen) c.destroy();
  }
}

/** Runs a raw command on a client of either kind. */
export function raw(c: AnyClient, ...args: string[]): Promise<unknown> {
  if (c instanceof Redis) return c.call(args[0]!, ...args.slice(1));
  return c.sendCommand(args);
}

export const token = () => crypto.randomUUID() + crypto.randomUUID();

/** A node stores the lock as `<16-character attempt id><token>`: the token part of a stored value. */
export const tokenOf = (stored: unknown) => (typeof stored === 'string' ? stored.slice(16) : null);
