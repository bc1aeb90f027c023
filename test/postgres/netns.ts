/**
 * A private PostgreSQL cluster behind a link the test can cut: a network namespace of its own
 * (so its port is always free), joined to this one by a veth pair; the server listens on the
 * namespace's end of it and on a Unix socket in its data directory (a Unix socket reaches across
 * network namespaces: a contender that is not partitioned). Needs root (`ip netns`, `runuser`).
 * Everything it made is removed by `stop()`, and what a killed earlier run of this process id
 * left is removed before it starts.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, appendFileSync, chownSync } from 'node:fs';

const run = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: 'pipe', timeout: 60_000 }).toString();
const quiet = (cmd: string, args: string[]) => {
  try {
    run(cmd, args);
  } catch {
    // already gone
  }
};

/** The newest installed server's binaries (Debian's layout), or those on PATH. */
function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => /^\d+$/.test(v)) : [];
  const v = versions.sort((a, b) => Number(a) - Number(b)).pop();
  return v && existsSync(`${root}/${v}/bin/pg_ctl`) ? `${root}/${v}/bin/` : '';
}

/** A locally administered unicast MAC address that neither end of the veth has. */
const NOWHERE = '02:00:00:00:de:ad';

export class PartitionedPg {
  readonly ns: string;
  private readonly outer: string;
  private readonly inner: string;
  /** Server address (inside the namespace) and client address (this side of the link). */
  readonly serverIp: string;
  private readonly clientIp: string;
  readonly port = 5432;
  private dir = '';
  private readonly bin = binDir();

  constructor() {
    const id = process.pid % 100_000;
    this.ns = `lhpart${id}`;
    this.outer = `lhp${id}a`;
    this.inner = `lhp${id}b`;
    const net = `10.${216 + (id % 32)}.${Math.floor(id / 32) % 256}`;
    this.serverIp = `${net}.2`;
    this.clientIp = `${net}.1`;
  }

  /** Client URL over the link (TCP, cut by `partition()`). */
  get tcpUrl(): string {
    return `postgres://postgres@${this.serverIp}:${this.port}/postgres`;
  }

  /** pg Pool options over the Unix socket (never cut). */
  get socket(): { host: string; port: number; user: string; database: string } {
    return { host: this.dir, port: this.port, user: 'postgres', database: 'postgres' };
  }

  /** Builds it all; throws (after cleaning up) when the machine cannot. */
  start(): void {
    this.stop();
    try {
      run('ip', ['netns', 'add', this.ns]);
      run('ip', ['link', 'add', this.outer, 'type', 'veth', 'peer', 'name', this.inner]);
      run('ip', ['link', 'set', this.inner, 'netns', this.ns]);
      run('ip', ['addr', 'add', `${this.clientIp}/30`, 'dev', this.outer]);
      run('ip', ['link', 'set', this.outer, 'up']);
      const inNs = (...args: string[]) => run('ip', ['netns', 'exec', this.ns, ...args]);
      inNs('ip', 'addr', 'add', `${this.serverIp}/30`, 'dev', this.inner);
      inNs('ip', 'link', 'set', this.inner, 'up');
      inNs('ip', 'link', 'set', 'lo', 'up');
      this.dir = mkdtempSync('/var/tmp/leasehold-partition-');
      const uid = Number(run('id', ['-u', 'postgres']).trim());
      const gid = Number(run('id', ['-g', 'postgres']).trim());
      chownSync(this.dir, uid, gid);
      run('runuser', ['-u', 'postgres', '--', `${this.bin}initdb`, '-D', this.dir, '-A', 'trust', '-U', 'postgres']);
      appendFileSync(`${this.dir}/pg_hba.conf`, `host all all ${this.clientIp}/32 trust\n`);
      const opts = `-p ${this.port} -c listen_addresses=${this.serverIp} -c unix_socket_directories=${this.dir} -c fsync=off -c shared_buffers=16MB -c max_connections=30`;
      inNs(
        'runuser',
        '-u',
        'postgres',
        '--',
        `${this.bin}pg_ctl`,
        '-D',
        this.dir,
        '-l',
        `${this.dir}/log`,
        '-w',
        '-t',
        '60',
        '-o',
        opts,
        'start',
      );
    } catch (e) {
      this.stop();
      throw e;
    }
  }

  /**
   * Nothing passes either way, nobody is told: each side's frames leave it normally but are
   * addressed to a MAC address no one has, so the other end of the veth drops them on arrival
   * (not for this host). Not `ip link set down`: that takes the carrier away, the sends then fail
   * locally, and Linux retries a keepalive probe that could not be sent every 0.5 s without
   * counting it, so the server would never end the session. (No `tc netem` or drop action in
   * this kernel, hence the neighbour entries.)
   */
  partition(): void {
    this.cut('toServer');
    this.cut('toClient');
  }

  /**
   * One direction of `partition()`: 'toServer' drops what the client sends (its ACKs too),
   * 'toClient' what the server sends.
   */
  cut(direction: 'toServer' | 'toClient'): void {
    if (direction === 'toServer') {
      run('ip', ['neigh', 'replace', this.serverIp, 'lladdr', NOWHERE, 'nud', 'permanent', 'dev', this.outer]);
      return;
    }
    run('ip', [
      'netns',
      'exec',
      this.ns,
      'ip',
      'neigh',
      'replace',
      this.clientIp,
      'lladdr',
      NOWHERE,
      'nud',
      'permanent',
      'dev',
      this.inner,
    ]);
  }

  /**
   * Resolves once the server has nothing unacknowledged on its TCP connections (Send-Q 0), so
   * that a cut right after a reply does not lose the client's (delayed) ACK of it: the server
   * would then be retransmitting, not probing, and Linux sends no keepalive while data is
   * unacknowledged (it gives up only after `tcp_retries2`, ~15 min). Throws after `withinMs`.
   */
  async settled(withinMs = 5_000): Promise<void> {
    const until = performance.now() + withinMs;
    for (;;) {
      const queues = this.sendQueues();
      if (queues.length > 0 && queues.every((q) => q === 0)) return;
      if (performance.now() > until) throw new Error(`the server's connections did not settle: ${queues.join(' ')}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** The Send-Q (bytes the client has not acknowledged) of each of the server's TCP connections. */
  private sendQueues(): number[] {
    const args = ['netns', 'exec', this.ns, 'ss', '-Htn', 'state', 'established', `( sport = :${this.port} )`];
    const rows = run('ip', args).trim().split('\n').filter(Boolean);
    return rows.map((r) => Number(r.trim().split(/\s+/)[1]));
  }

  /** Resolves once one of the server's TCP connections has data unacknowledged. */
  async unacked(withinMs = 5_000): Promise<void> {
    const until = performance.now() + withinMs;
    while (!this.sendQueues().some((q) => q > 0)) {
      if (performance.now() > until) throw new Error('no data of the server went unacknowledged');
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** Undoes `partition()`: the entries go, both sides find each other by ARP again. */
  heal(): void {
    quiet('ip', ['neigh', 'del', this.serverIp, 'dev', this.outer]);
    quiet('ip', ['netns', 'exec', this.ns, 'ip', 'neigh', 'del', this.clientIp, 'dev', this.inner]);
  }

  stop(): void {
    if (this.dir && existsSync(`${this.dir}/postmaster.pid`)) {
      quiet('ip', [
        'netns',
        'exec',
        this.ns,
        'runuser',
        '-u',
        'postgres',
        '--',
        `${this.bin}pg_ctl`,
        '-D',
        this.dir,
        '-m',
        'immediate',
        'stop',
      ]);
    }
    quiet('ip', ['link', 'del', this.outer]);
    quiet('ip', ['netns', 'del', this.ns]);
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.dir = '';
  }
}
