/**
 * A 3-member etcd cluster that a test owns: its own processes, free OS ports and a temporary
 * data directory, so a test may kill and restart members without disturbing the services'
 * cluster (scripts/services.d/etcd.sh) or another run. Needs the `etcd` binary (Debian's
 * etcd-server, installed by scripts/services.sh); without it the test fails, it never skips.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts } from './ports.js';

interface Member {
  readonly name: string;
  readonly client: number;
  readonly peer: number;
  proc: ChildProcess | null;
  stopped?: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class EtcdCluster {
  private constructor(
    readonly dir: string,
    readonly members: Member[],
  ) {}

  static async start(size = 3): Promise<EtcdCluster> {
    if (spawnSync('etcd', ['--version']).status !== 0) {
      throw new Error('the etcd binary is missing: run scripts/services.sh (it installs etcd-server)');
    }
    const ports = await freePorts(2 * size);
    const members = Array.from({ length: size }, (_, i) => ({
      name: `m${i + 1}`,
      client: ports[2 * i]!,
      peer: ports[2 * i + 1]!,
      proc: null,
    }));
    const c = new EtcdCluster(mkdtempSync(join(tmpdir(), 'lh-etcd-')), members);
    for (const m of members) c.spawn(m, 'new');
    await Promise.all(members.map((m) => c.healthy(m)));
    return c;
  }

  /** host:port of each member's client endpoint. */
  get hosts(): string[] {
    return this.members.map((m) => `127.0.0.1:${m.client}`);
  }

  private spawn(m: Member, state: 'new' | 'existing'): void {
    const initial = this.members.map((x) => `${x.name}=http://127.0.0.1:${x.peer}`).join(',');
    m.proc = spawn(
      'etcd',
      [
        `--name=${m.name}`,
        `--data-dir=${join(this.dir, m.name)}`,
        `--listen-client-urls=http://127.0.0.1:${m.client}`,
        `--advertise-client-urls=http://127.0.0.1:${m.client}`,
        `--listen-peer-urls=http://127.0.0.1:${m.peer}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${m.peer}`,
        `--initial-cluster=${initial}`,
        `--initial-cluster-state=${state}`,
        `--initial-cluster-token=${this.dir}`,
        '--listen-metrics-urls=',
        '--logger=zap',
        '--log-outputs=stderr',
        '--log-level=error',
      ],
      { stdio: ['ignore', 'ignore', 'ignore'] },
    );
  }

  /** Waits until the member answers GET /health with health true (a quorum is there). */
  async healthy(m: Member, ms = 30_000): Promise<void> {
    const until = performance.now() + ms;
    for (;;) {
      try {
        const r = await fetch(`http://127.0.0.1:${m.client}/health`, { signal: AbortSignal.timeout(1000) });
        if (r.ok && ((await r.json()) as { health?: string }).health === 'true') return;
      } catch {
        // not up yet
      }
      if (performance.now() > until) throw new Error(`etcd member ${m.name} did not become healthy`);
      await sleep(100);
    }
  }

  /** SIGKILLs member `i` and waits for it to exit. */
  async kill(i: number): Promise<void> {
    const m = this.members[i]!;
    const p = m.proc;
    if (!p || p.exitCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGKILL');
    m.stopped = false;
    await exited;
    m.proc = null;
  }

  /** Starts member `i` again with its data; resolves once it is healthy. */
  async restart(i: number): Promise<void> {
    const m = this.members[i]!;
    if (m.proc) return;
    this.spawn(m, 'existing');
    await this.healthy(m);
  }

  /** SIGSTOPs member `i` (it neither answers nor heartbeats) until `cont(i)`. */
  stopMember(i: number): void {
    const m = this.members[i]!;
    if (m.proc && m.proc.exitCode === null && !m.stopped) {
      m.proc.kill('SIGSTOP');
      m.stopped = true;
    }
  }

  cont(i: number): void {
    const m = this.members[i]!;
    if (m.proc && m.stopped) m.proc.kill('SIGCONT');
    m.stopped = false;
  }

  /** Every member running (killed ones restarted, stopped ones continued) and healthy. */
  async heal(): Promise<void> {
    this.members.forEach((_, i) => this.cont(i));
    await Promise.all(this.members.map((m, i) => (m.proc ? this.healthy(m) : this.restart(i))));
  }

  /** etcdctl against the cluster (an outsider's tool): stdout. */
  etcdctl(...args: string[]): string {
    const r = spawnSync('etcdctl', [`--endpoints=${this.hosts.join(',')}`, ...args], {
      env: { ...process.env, ETCDCTL_API: '3' },
      encoding: 'utf8',
      timeout: 10_000,
    });
    if (r.status !== 0) throw new Error(`etcdctl ${args.join(' ')} failed: ${r.stderr || r.error}`);
    return r.stdout;
  }

  async stop(): Promise<void> {
    await Promise.all(this.members.map((_, i) => this.kill(i)));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
