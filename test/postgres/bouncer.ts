/**
 * A private PgBouncer for one test file, on a free loopback port in front of the local Postgres
 * (5432), run as a child process (never daemonised) and stopped by `stop()`: database `test` in
 * transaction pooling with `server_round_robin = 1` and 2 server connections (a pooler that does
 * not hand a client its last server connection back), database `test_session` in session pooling
 * (to `test`). Started as root, it switches to the postgres user (`-u`), as PgBouncer refuses to
 * run as root. A missing binary or a bouncer that does not answer fails the test.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import pg from 'pg';

export interface PrivateBouncer {
  /** Transaction pooling, round robin over 2 server connections. */
  readonly transactionUrl: string;
  /** Session pooling: one server connection per client connection. */
  readonly sessionUrl: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((ok, fail) => srv.once('error', fail).listen(0, '127.0.0.1', ok));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise((ok) => srv.close(ok));
  return port;
}

function binary(): string {
  for (const b of ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer'])
    if (existsSync(b)) return b;
  throw new Error('pgbouncer is not installed (run scripts/services.sh, which installs it)');
}

export async function startBouncer(): Promise<PrivateBouncer> {
  const bin = binary();
  const root = process.getuid?.() === 0;
  const dir = mkdtempSync('/var/tmp/leasehold-test-pgb-');
  let child: ChildProcess | null = null;
  const stop = async () => {
    const c = child;
    child = null;
    if (c && c.exitCode === null && c.signalCode === null) {
      const exited = new Promise((ok) => c.once('exit', ok));
      c.kill('SIGTERM'); // immediate shutdown (SIGINT waits for its clients in PgBouncer < 1.23)
      await Promise.race([exited, new Promise((ok) => setTimeout(ok, 3000).unref())]);
      if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const port = await freePort();
    const conf = join(dir, 'pgbouncer.ini');
    writeFileSync(join(dir, 'users.txt'), '"postgres" ""\n');
    writeFileSync(
      conf,
      `[databases]
test = host=127.0.0.1 port=5432 dbname=test
test_session = host=127.0.0.1 port=5432 dbname=test pool_mode=session pool_size=10
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = trust
auth_file = ${join(dir, 'users.txt')}
pool_mode = transaction
server_round_robin = 1
default_pool_size = 2
min_pool_size = 2
max_client_conn = 100
ignore_startup_parameters = extra_float_digits,options
logfile = ${join(dir, 'pgbouncer.log')}
`,
    );
    if (root) {
      chmodSync(dir, 0o755); // a mkdtemp directory is private: the postgres user must enter it
      for (const f of ['', 'pgbouncer.ini', 'users.txt']) chownSync(join(dir, f), postgresUid(), -1);
      writeFileSync(join(dir, 'pgbouncer.log'), '');
      chownSync(join(dir, 'pgbouncer.log'), postgresUid(), -1);
    }
    const c = spawn(bin, root ? ['-u', 'postgres', conf] : [conf], { stdio: ['ignore', 'ignore', 'pipe'] });
    child = c;
    // should the test process end without stop() (a killed worker), the bouncer goes with it
    const orphan = () => c.kill('SIGKILL');
    process.once('exit', orphan);
    c.once('exit', () => process.off('exit', orphan));
    let stderr = '';
    c.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    const url = (db: string) => `postgres://postgres@127.0.0.1:${port}/${db}`;
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (c.exitCode !== null) throw new Error(`private pgbouncer exited (${c.exitCode}): ${stderr.slice(0, 500)}`);
      const probe = new pg.Client({ connectionString: url('test'), connectionTimeoutMillis: 1000 });
      probe.on('error', () => {});
      const up = await probe.connect().then(
        () => probe.query('select 1').then(() => true),
        () => false,
      );
      await probe.end().catch(() => {});
      if (up) break;
      if (Date.now() > deadline)
        throw new Error(`private pgbouncer on ${port} did not answer: ${stderr.slice(0, 500)}`);
      await new Promise((ok) => setTimeout(ok, 100));
    }
    return { transactionUrl: url('test'), sessionUrl: url('test_session'), stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

let uid: number | undefined;
function postgresUid(): number {
  if (uid === undefined) {
    const line = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('postgres:'));
    if (!line) throw new Error('no postgres user to run pgbouncer as');
    uid = Number(line.split(':')[2]);
  }
  return uid;
}
