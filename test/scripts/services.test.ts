/**
 * scripts/services.sh start / status / stop, on private ports the OS handed out and a private
 * state dir: the shared servers are never touched. `stop` stops only what the script started.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { freePort, freeRun } from '../support/ports.js';

const state = mkdtempSync(join(tmpdir(), 'leasehold-services-'));
const foreign: ChildProcess[] = [];
let env: NodeJS.ProcessEnv = {};

/**
 * Runs scripts/services.sh. One that hangs is ended (SIGTERM: its exit trap frees the services'
 * lock) well before its test's timeout, so it cannot hold that lock through the next tests.
 */
function services(...args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(
      'bash',
      ['scripts/services.sh', ...args],
      { env: { ...process.env, ...env }, timeout: 50_000 },
      (e, stdout, stderr) => {
        const err = e as { code?: number; killed?: boolean } | null;
        const code = !err ? 0 : err.killed ? -1 : Number(err.code ?? 1);
        resolve({ code, out: stdout + stderr + (err?.killed ? '\n(ended after 50 s)' : '') });
      },
    );
  });
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) =>
    execFile('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'ping'], (e, out) =>
      resolve(!e && out.trim() === 'PONG'),
    ),
  );
}

afterAll(async () => {
  // in case a test failed half-way; only the private servers (a run filtered with -t may never
  // have set the private state dir: a stop then would end the shared services)
  if (env.LEASEHOLD_SERVICES_DIR === state) await services('stop', 'redis', 'redlock', 'etcd', 'etcd-cluster');
  for (const p of foreign) p.kill('SIGKILL');
  rmSync(state, { recursive: true, force: true });
});

test('start is idempotent, status reports, stop stops what it started and leaves a foreign server alone', async () => {
  const [single, a, b, other] = [await freePort(), await freePort(), await freePort(), await freePort()];
  env = {
    LEASEHOLD_SERVICES_DIR: state,
    LEASEHOLD_REDIS_PORT: String(single),
    LEASEHOLD_REDLOCK_PORTS: `${a} ${b}`,
  };

  expect((await services('status', 'redis', 'redlock')).code).toBe(3); // all down
  const started = await services('start', 'redis', 'redlock');
  expect(started.code, started.out).toBe(0);
  for (const p of [single, a, b]) expect(await ping(p)).toBe(true);
  const pid = readFileSync(join(state, `redis-${a}.pid`), 'utf8').trim();

  const again = await services('redis', 'redlock'); // `start` is the default
  expect(again.code, again.out).toBe(0);
  expect(again.out).not.toContain('starting');
  expect(readFileSync(join(state, `redis-${a}.pid`), 'utf8').trim()).toBe(pid);

  const status = await services('status', 'redis', 'redlock');
  expect(status.code, status.out).toBe(0);
  expect(status.out).toMatch(new RegExp(`redlock +up +127\\.0\\.0\\.1:${a} +pid ${pid}, started by this script`));

  // a Redis the script did not start, on the port it is told to use
  const srv = spawn('redis-server', [
    '--bind',
    '127.0.0.1',
    '--port',
    String(other),
    '--save',
    '',
    '--appendonly',
    'no',
  ]);
  foreign.push(srv);
  await expect.poll(() => ping(other), { timeout: 10_000 }).toBe(true);

  const stopped = await services('stop', 'redis', 'redlock');
  expect(stopped.code, stopped.out).toBe(0);
  for (const p of [single, a, b]) expect(await ping(p)).toBe(false);
  const down = await services('status', 'redis', 'redlock');
  expect(down.code).toBe(3);
  expect(down.out).toContain(`redlock    down  127.0.0.1:${a}`);

  env = { ...env, LEASEHOLD_REDIS_PORT: String(other) };
  const status2 = await services('status', 'redis');
  expect(status2.out).toContain('not started by this script');
  const left = await services('stop', 'redis');
  expect(left.out).toContain('not started by this script here; left alone');
  expect(await ping(other)).toBe(true);
});

test('etcd: one member and a 3-member cluster start idempotently, answer health, and stop', async () => {
  const [single, cluster] = [await freeRun(2), await freeRun(6)];
  env = {
    LEASEHOLD_SERVICES_DIR: state,
    LEASEHOLD_ETCD_PORT: String(single),
    LEASEHOLD_ETCD_CLUSTER_PORT: String(cluster),
  };
  expect((await services('status', 'etcd', 'etcd-cluster')).code).toBe(3);
  const started = await services('start', 'etcd', 'etcd-cluster');
  expect(started.code, started.out).toBe(0);
  const health = async (port: number) => {
    const r = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
    return r?.ok ? ((await r.json()) as { health: string }).health : 'down';
  };
  for (const p of [single, cluster, cluster + 2, cluster + 4]) expect(await health(p)).toBe('true');
  const again = await services('etcd', 'etcd-cluster');
  expect(again.code, again.out).toBe(0);
  expect(again.out).not.toContain('starting');
  const status = await services('status', 'etcd-cluster');
  expect(status.out).toMatch(
    new RegExp(`etcd-c2 +up +127\\.0\\.0\\.1:${cluster + 2} +pid \\d+, started by this script`),
  );
  const stopped = await services('stop', 'etcd', 'etcd-cluster');
  expect(stopped.code, stopped.out).toBe(0);
  for (const p of [single, cluster, cluster + 2, cluster + 4]) expect(await health(p)).toBe('down');
  expect((await services('status', 'etcd', 'etcd-cluster')).code).toBe(3);
}, 120_000);

test('a server that cannot bind its port fails the start at once and shows why', async () => {
  const base = await freeRun(2);
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-services-bind-'));
  const saved = env;
  env = { LEASEHOLD_SERVICES_DIR: dir, LEASEHOLD_ETCD_PORT: String(base) };
  const { createServer } = await import('node:net');
  const squatter = createServer();
  await new Promise<void>((r) => squatter.listen(base + 1, '127.0.0.1', r)); // the member's peer port
  try {
    const t0 = Date.now();
    const r = await services('start', 'etcd');
    expect(r.code, r.out).toBe(1);
    expect(r.out).toContain(`etcd-single on ${base} exited before it came up`);
    expect(r.out).toMatch(/address already in use/);
    expect(Date.now() - t0).toBeLessThan(20_000); // not the 40 s of waiting for a dead server
  } finally {
    env = saved;
    squatter.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an unknown service name is refused', async () => {
  const r = await services('status', 'nope');
  expect(r.code).toBe(2);
  expect(r.out).toContain('unknown service "nope"');
});

test('start and stop run one at a time: a second one waits for the lock; a dead holder’s lock is taken over', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-services-lock-'));
  const own = { LEASEHOLD_SERVICES_DIR: dir, LEASEHOLD_REDIS_PORT: String(await freePort()) };
  const saved = env;
  env = own;
  const holder = spawn('sleep', ['60']);
  try {
    // a live holder (as a services.sh in the middle of a start would be)
    mkdirSync(join(dir, 'services.lock'));
    writeFileSync(join(dir, 'services.lock', 'pid'), String(holder.pid));
    let done = false;
    const second = services('stop', 'redis').then((r) => ((done = true), r));
    const released = new Promise((r) => holder.once('exit', r));
    await new Promise((r) => setTimeout(r, 1500));
    expect(done).toBe(false); // still waiting for the holder
    holder.kill('SIGKILL'); // it dies without unlocking: its lock is stale
    await released;
    const r = await second;
    expect(r.code, r.out).toBe(0);
    expect(r.out).toContain('waiting for another services.sh');
    expect(existsSync(join(dir, 'services.lock'))).toBe(false); // unlocked on exit
  } finally {
    env = saved;
    holder.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});
function cli(port: number, ...args: string[]): Promise<string> {
  return new Promise((resolve) =>
    execFile('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], (_, out) => resolve(out)),
  );
}

test('cluster: start creates a 3+3 Redis Cluster once, a second start leaves it alone, stop ends it', async () => {
  const ports: number[] = [];
  for (let i = 0; i < 6; i++) ports.push(await freeRun(1, { bus: true }));
  env = {
    LEASEHOLD_SERVICES_DIR: state,
    LEASEHOLD_CLUSTER_PORTS: ports.join(' '),
    LEASEHOLD_CLUSTER_CONVERGE_TRIES: '10',
  };
  try {
    const started = await services('start', 'cluster');
    expect(started.code, started.out).toBe(0);
    expect(started.out).toContain('creating the cluster');
    const status = await services('status', 'cluster');
    expect(status.code, status.out).toBe(0);
    const again = await services('start', 'cluster');
    expect(again.code, again.out).toBe(0);
    expect(again.out).not.toMatch(/starting|creating/);
    // 6 nodes, 3 of them masters serving slots (cluster_size). Not "3 lines say master": on a
    // loaded machine a master may miss the 2 s node timeout once and a replica take over, which
    // leaves a "master,fail" line beside the promoted one
    const info = await cli(ports[0]!, 'cluster', 'info');
    expect(info).toMatch(/cluster_known_nodes:6\b/);
    expect(info).toMatch(/cluster_size:3\b/);
    expect(info).toMatch(/cluster_slots_assigned:16384\b/);
    // a cluster that cannot converge (slot 0 unassigned everywhere: cluster_state:fail for good) is
    // diagnosed and created afresh instead of failing every later file that needs it
    for (const p of ports) await cli(p, 'cluster', 'delslots', '0');
    expect(await cli(ports[0]!, 'cluster', 'info')).toMatch(/cluster_state:fail/);
    const mended = await services('start', 'cluster');
    expect(mended.code, mended.out).toBe(0);
    expect(mended.out).toContain('did not reach cluster_state:ok with every node agreeing on the slots; recreating it');
    expect(mended.out).toMatch(new RegExp(`${ports[0]}: cluster_state:fail .*cluster_slots_ok:16383`));
    expect(mended.out).toContain('creating the cluster');
    const fresh = await cli(ports[0]!, 'cluster', 'info');
    expect(fresh).toMatch(/cluster_state:ok/);
    expect(fresh).toMatch(/cluster_slots_assigned:16384\b/);

    // every node has its own directory and starts empty. A replica's full sync writes its master's
    // keys to dump.rdb in its directory; when the nodes shared one, a cluster created afresh loaded
    // those keys, its nodes claimed their slots and the create failed ("Node … is not empty")
    for (let i = 0; i < 100; i++) await cli(ports[0]!, '-c', 'set', `k${i}`, 'v');
    const replica = (await cli(ports[0]!, 'cluster', 'nodes'))
      .split('\n')
      .filter((l) => / slave /.test(l))
      .map((l) => Number(/:(\d+)@/.exec(l)![1]))[0]!;
    process.kill(Number(readFileSync(join(state, `redis-${replica}.pid`), 'utf8').trim()), 'SIGKILL');
    while (await ping(replica)) await new Promise((r) => setTimeout(r, 50));
    const back = await services('start', 'cluster'); // the replica comes back and syncs in full
    expect(back.code, back.out).toBe(0);
    const dump = join(state, 'cluster', String(replica), 'dump.rdb');
    for (let i = 0; i < 200 && !existsSync(dump); i++) await new Promise((r) => setTimeout(r, 50));
    expect(existsSync(dump), 'the full sync wrote the master’s data in the replica’s own directory').toBe(true);
    expect((await services('stop', 'cluster')).code).toBe(0);
    const recreated = await services('start', 'cluster');
    expect(recreated.code, recreated.out).toBe(0);
    expect(recreated.out).toContain('creating the cluster');
    for (const p of ports) {
      expect(await cli(p, 'cluster', 'info')).toMatch(/cluster_state:ok/);
      expect((await cli(p, 'dbsize')).trim()).toBe('0'); // started empty
    }
  } finally {
    const stopped = await services('stop', 'cluster');
    expect(stopped.code, stopped.out).toBe(0);
  }
  for (const p of ports) expect(await ping(p)).toBe(false);
}, 180_000);
