/**
 * A backend that dies under a running `leasehold`: the CLI exits within a short bound of the moment
 * nothing useful is left to do (the wait is over, the lease is lost), not after a call in flight
 * (opTimeout, 5s) and a goodbye the server never answers (2s more). Redis is reached through a TCP
 * proxy the test cuts: its sockets destroyed, its port no longer listening.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { ensureBuilt, JOB, killAll, monotonic, readLog, start, until } from './helpers.js';

const REDIS = { host: '127.0.0.1', port: 6379 };

interface Proxy {
  url: string;
  /** Everything clients sent through the proxy so far. */
  sent(): string;
  /** Resolves when the proxy was cut by `cutOn`. */
  wasCut: Promise<void>;
  /** How many replies (reads from Redis) went back to clients so far. */
  replies(): number;
  /** Forwards nothing more either way, sockets left open: a frozen server. */
  freeze(): void;
  /** Destroys every socket and stops listening: the backend is gone. */
  cut(): Promise<void>;
}

/** `cutOn`: the first client write containing it is not forwarded; the proxy is cut instead. */
async function proxy(cutOn?: string): Promise<Proxy> {
  const sockets = new Set<Socket>();
  let sent = '';
  let replies = 0;
  let frozen = false;
  let cutDone!: () => void;
  const wasCut = new Promise<void>((resolve) => (cutDone = resolve));
  const server: Server = createServer((c) => {
    const u = createConnection(REDIS);
    sockets.add(c).add(u);
    c.on('data', (d: Buffer) => {
      if (frozen) return;
      const text = d.toString('latin1');
      sent += text;
      if (cutOn !== undefined && text.includes(cutOn)) void self.cut().then(cutDone);
      else u.write(d);
    });
    u.on('data', (d: Buffer) => {
      if (frozen) return;
      replies++;
      c.write(d);
    });
    const end = () => {
      c.destroy();
      u.destroy();
    };
    for (const s of [c, u]) s.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  let closed: Promise<void> | null = null;
  const self: Proxy = {
    wasCut,
    url: `redis://127.0.0.1:${port}/0`,
    sent: () => sent,
    replies: () => replies,
    freeze: () => void (frozen = true),
    cut: () =>
      (closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      })),
  };
  return self;
}

const dir = mkdtempSync(join(tmpdir(), 'lh-dead-'));
const proxies: Proxy[] = [];
beforeAll(() => ensureBuilt(), 180_000);
afterEach(async () => {
  killAll();
  await Promise.all(proxies.splice(0).map((p) => p.cut()));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('leasehold run when Redis goes away', () => {
  const prefix = `lh-dead-${randomUUID().slice(0, 8)}`;
  let n = 0;
  const fresh = () => ({ key: `job${++n}`, log: join(dir, `log${n}`) });
  const run = (url: string, key: string, log: string, flags: string[], jobMs: number) =>
    start(['run', key, '--prefix', prefix, ...flags, '--', process.execPath, JOB], {
      LEASEHOLD_URL: url,
      JOB_LOG: log,
      JOB_MS: String(jobMs),
    });

  test('an exhausted --wait on a dead backend exits 69 within a short bound of the wait, not opTimeout + 2s later', async () => {
    const { key, log } = fresh();
    // connected through the proxy, the run's first attempt on the key never reaches Redis: the
    // proxy is cut instead, so the run waits on a backend that is gone
    const p = await proxy(key);
    proxies.push(p);
    const t0 = monotonic();
    const r = run(p.url, key, log, ['--ttl', '30s', '--wait', '2s'], 100);
    await p.wasCut;
    const done = await r.done;
    const ms = monotonic() - t0;
    expect(done.code, done.stderr).toBe(69);
    // the wait (2s) from the start, plus a short bound for closing and the process's start; the
    // old close waited opTimeout (5s) + 2s more
    expect(ms, done.stderr).toBeLessThan(2000 + 2500);
    expect(readLog(log)).toHaveLength(0); // the command never ran
  }, 30_000);

  test('a wait that ran out while Redis froze exits 75 within a short bound of the wait, not after an unanswered inspect', async () => {
    const { key, log } = fresh();
    // the key is held (directly, not through the proxy): the proxied run finds it busy and waits
    const holder = run('redis://127.0.0.1:6379/0', key, log, ['--ttl', '30s'], 60_000);
    await until(() => readLog(log).some((l) => l.ev === 'start'), 10_000, 'the holder to start');
    const p = await proxy();
    proxies.push(p);
    const t0 = monotonic();
    const r = run(p.url, key, log, ['--ttl', '30s', '--wait', '2s'], 100);
    // the run's first attempt found the key busy (its reply came back): the run is waiting
    await until(() => p.sent().includes(key), 10_000, 'an attempt on the key through the proxy');
    const before = p.replies();
    await until(() => p.replies() > before, 10_000, 'the reply to that attempt');
    p.freeze(); // no attempt fails before the wait ends (opTimeout is 5s): the run is busy, 75
    const done = await r.done;
    const ms = monotonic() - t0;
    expect(done.code, done.stderr).toBe(75);
    // the wait (2s), then at most 1s asking who holds the key and 1s closing; the old code waited
    // opTimeout (5s) for the answer that never came
    expect(ms, done.stderr).toBeLessThan(2000 + 4000);
    expect(readLog(log).filter((l) => l.ev === 'start')).toHaveLength(1); // the waiter's command never ran
    holder.proc.kill('SIGKILL');
  }, 30_000);

  test('a lease lost to a dead backend exits 79 within a short bound of its command ending, not opTimeout + 2s later', async () => {
    const { key, log } = fresh();
    const p = await proxy();
    proxies.push(p);
    const r = run(p.url, key, log, ['--ttl', '3s', '--grace', '5s'], 60_000);
    await until(() => readLog(log).some((l) => l.ev === 'start'), 10_000, 'the command to start');
    await p.cut();
    const done = await r.done;
    const exited = monotonic();
    expect(done.code, done.stderr).toBe(79);
    expect(done.stderr).toMatch(/lost/);
    const term = readLog(log).find((l) => l.ev === 'term');
    expect(term, 'the command got SIGTERM').toBeDefined();
    // the command ended (at SIGTERM) and leasehold exits shortly after; the old close took ~7s
    expect(exited - term!.t, done.stderr).toBeLessThan(2000);
  }, 30_000);
});
