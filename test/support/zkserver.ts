/**
 * ZooKeeper servers a test owns: one standalone server or a 3-member ensemble on free OS ports
 * (loopback only), each `java … QuorumPeerMain zoo.cfg` under a small shell guard that SIGKILLs
 * it when our pipe closes (a crashed test leaves no JVM behind). Tests may SIGSTOP, SIGKILL and
 * restart members. Same shape as the fault suite's RedisServer (start/stop/cont/kill/heal).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts } from './ports.js';

const CP = '/etc/zookeeper/conf:/usr/share/java/zookeeper.jar';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const haveZookeeper = (): boolean => existsSync('/usr/share/java/zookeeper.jar');

/** A four-letter word's reply ('' when nothing answers in time). */
export function fourLetter(port: number, word: string, timeoutMs = 1000): Promise<string> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port });
    let out = '';
    const t = setTimeout(() => done(), timeoutMs);
    const done = () => {
      clearTimeout(t);
      s.destroy();
      resolve(out);
    };
    s.on('connect', () => s.write(word));
    s.on('data', (d) => (out += d.toString()));
    s.on('end', done);
    s.on('error', done);
  });
}

/** 'standalone' | 'leader' | 'follower', or null while it does not serve. */
export async function modeOf(port: number): Promise<string | null> {
  return /^Mode: (\w+)/m.exec(await fourLetter(port, 'srvr'))?.[1] ?? null;
}

const live = new Set<ZkServer>();
process.on('exit', () => {
  for (const s of live) {
    try {
      process.kill(s.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
});

export class ZkServer {
  private guard: ChildProcess | null = null;
  pid = 0;
  stopped = false;
  /** As the fault suite's RedisServer has them (no libfaketime here). */
  readonly options: { faketime?: boolean } = {};

  constructor(
    readonly port: number,
    readonly dir: string,
  ) {}

  get up(): boolean {
    return this.guard !== null;
  }

  async start(): Promise<void> {
    if (this.guard) return;
    const args = [
      '-Xms32m',
      '-Xmx128m',
      '-XX:+UseSerialGC',
      '-XX:TieredStopAtLevel=1',
      '-Dzookeeper.root.logger=WARN,CONSOLE',
      '-cp',
      CP,
      'org.apache.zookeeper.server.quorum.QuorumPeerMain',
      join(this.dir, 'zoo.cfg'),
    ];
    const guard = spawn(
      'sh',
      ['-c', 'java "$@" >>"$LH_ZK_LOG" 2>&1 & echo $!; read _; kill -9 $! 2>/dev/null', 'sh', ...args],
      { stdio: ['pipe', 'pipe', 'ignore'], env: { ...process.env, LH_ZK_LOG: join(this.dir, 'server.log') } },
    );
    this.guard = guard;
    live.add(this);
    this.pid = await new Promise<number>((resolve, reject) => {
      guard.stdout!.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
      guard.once('error', reject);
    });
    this.stopped = false;
    await this.serving();
  }

  /** Serving (standalone, or a member of a formed quorum). */
  async serving(timeoutMs = 60_000): Promise<void> {
    const until = performance.now() + timeoutMs;
    while (performance.now() < until) {
      if (await modeOf(this.port)) return;
      await sleep(100);
    }
    throw new Error(`ZooKeeper on ${this.port} is not serving after ${timeoutMs}ms (log: ${this.dir}/server.log)`);
  }

  /** SIGSTOP: frozen; its connections stay open and starve. */
  stop(): void {
    if (this.pid && this.guard) process.kill(this.pid, 'SIGSTOP');
    this.stopped = true;
  }

  cont(): void {
    if (this.pid && this.guard) process.kill(this.pid, 'SIGCONT');
    this.stopped = false;
  }

  /** SIGKILL: gone, with every connection (its data directory stays for a restart). */
  async kill(): Promise<void> {
    const g = this.guard;
    if (!g) return;
    this.guard = null;
    live.delete(this);
    try {
      if (this.stopped) process.kill(this.pid, 'SIGCONT');
      process.kill(this.pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
    const exited = new Promise((r) => g.once('exit', r));
    g.stdin!.end();
    await Promise.race([exited, sleep(2000)]);
    this.stopped = false;
    for (let i = 0; i < 100 && (await fourLetter(this.port, 'ruok', 200)) !== ''; i++) await sleep(20);
  }

  /** Deletes the data (snapshots, logs): the next start is empty. Not while running. */
  wipe(): void {
    for (const f of ['version-2']) rmSync(join(this.dir, 'data', f), { recursive: true, force: true });
  }

  async destroy(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }

  async heal(): Promise<void> {
    if (this.stopped) this.cont();
    if (!this.guard) await this.start();
  }
}

export interface ZkCluster {
  servers: ZkServer[];
  /** `host:port,…` of every member. */
  hosts: string;
  /** The member whose client connections include session `sessionHex`, or -1. */
  memberOf(sessionHex: string): Promise<number>;
  /** Every member running and not stopped, and serving. */
  heal(): Promise<void>;
  destroy(): Promise<void>;
}

/**
 * `n` = 1: a standalone server; `n` = 3: an ensemble. `tickMs` sets how fast sessions may expire
 * (the server accepts session timeouts from 2 ticks up to `maxSessionMs`).
 */
export async function startCluster(n: 1 | 3, tickMs = 200, maxSessionMs = 30_000): Promise<ZkCluster> {
  const root = mkdtempSync(join(tmpdir(), 'leasehold-zk-'));
  const ports = await freePorts(n * 3);
  const client = ports.slice(0, n);
  const servers: ZkServer[] = [];
  for (let i = 0; i < n; i++) {
    const dir = join(root, `m${i + 1}`);
    mkdirSync(join(dir, 'data'), { recursive: true });
    const lines = [
      `tickTime=${tickMs}`,
      'initLimit=50',
      'syncLimit=10',
      `dataDir=${join(dir, 'data')}`,
      `clientPort=${client[i]}`,
      'clientPortAddress=127.0.0.1',
      `minSessionTimeout=${2 * tickMs}`,
      `maxSessionTimeout=${maxSessionMs}`,
      'admin.enableServer=false',
      '4lw.commands.whitelist=ruok,srvr,cons,stat',
      'maxClientCnxns=0',
      'forceSync=no',
      'preAllocSize=4096',
    ];
    if (n > 1) {
      for (let j = 0; j < n; j++) lines.push(`server.${j + 1}=127.0.0.1:${ports[n + j]}:${ports[2 * n + j]}`);
      writeFileSync(join(dir, 'data', 'myid'), `${i + 1}\n`);
    }
    writeFileSync(join(dir, 'zoo.cfg'), lines.join('\n') + '\n');
    servers.push(new ZkServer(client[i]!, dir));
  }
  const cluster: ZkCluster = {
    servers,
    hosts: client.map((p) => `127.0.0.1:${p}`).join(','),
    async memberOf(sessionHex: string): Promise<number> {
      const id = `sid=0x${sessionHex.replace(/^0+/, '')}`;
      for (const [i, s] of servers.entries()) {
        if (!s.up || s.stopped) continue;
        if ((await fourLetter(s.port, 'cons')).includes(id)) return i;
      }
      return -1;
    },
    async heal(): Promise<void> {
      await Promise.all(servers.map((s) => s.heal()));
    },
    async destroy(): Promise<void> {
      await Promise.all(servers.map((s) => s.kill()));
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    await Promise.all(servers.map((s) => s.start()));
  } catch (e) {
    await cluster.destroy();
    throw e;
  }
  return cluster;
}
