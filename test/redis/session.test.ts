/**
 * Issue #17.1, Redis session renewal (`redis(client, { session: true })`), with real processes:
 * a holder frozen (SIGSTOP) past its TTL loses all of its locks at once, and the next holders get
 * higher fences; the resumed holder is told; leases of different TTLs keep their own expiry;
 * runExclusive's lockAtLeastFor window outlives a SIGKILL; a stale token can do nothing once its
 * session lapsed; a session key deleted by hand frees all of its locks, and the holder hears it
 * at its next renewal.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { redis, type RedisBackend } from '../../src/backends/redis/index.js';
import { REFRESH_MANY } from '../../src/backends/redis/scripts.js';
import { BackendError } from '../../src/errors.js';
import { Cluster } from 'ioredis';
import { createLocks, InvalidArgumentError, LeaseLostError, type Lease, type Locks } from '../../src/index.js';
import { Clients, REDIS_URL } from '../support/redis.js';
import { shortPx } from '../support/redis-session.js';

const CHILD = fileURLToPath(new URL('./session-child.ts', import.meta.url));
const clients = new Clients();
const open: Locks[] = [];
const kids: ChildProcess[] = [];
const prefix = `lh-sess-${randomUUID().slice(0, 8)}`;
afterEach(async () => {
  for (const k of kids.splice(0)) if (k.exitCode === null && k.signalCode === null) k.kill('SIGKILL');
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

async function locksOn(opts = {}) {
  const l = createLocks(redis(await clients.make('ioredis'), { session: true }), { prefix, ...opts });
  open.push(l);
  return l;
}

/** Polls `f` until it returns true or `ms` pass; false on the deadline. */
async function until(f: () => Promise<boolean> | boolean, ms: number, every = 20): Promise<boolean> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await f()) return true;
    await new Promise((r) => setTimeout(r, every));
  }
  return false;
}

interface Msg {
  kind: string;
  [k: string]: any;
}

/** A child process and the JSON lines it printed so far. */
function child(...args: string[]) {
  const p = spawn(process.execPath, ['--import', 'tsx', CHILD, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  kids.push(p);
  const msgs: Msg[] = [];
  createInterface({ input: p.stdout! }).on('line', (l) => msgs.push(JSON.parse(l) as Msg));
  const next = async (kind: string, ms = 20_000) => {
    expect(await until(() => msgs.some((m) => m.kind === kind), ms), `the child never said ${kind}`).toBe(true);
    return msgs.find((m) => m.kind === kind)!;
  };
  return { p, msgs, next };
}

const lockKey = (key: string) => `{${prefix}:${key}}`;

/**
 * Records, per round trip of `backend`, whether it carried a lock refresh; while `fail()` says
 * so, such a round trip fails: 'trip' as a dropped connection would (nothing reaches the server),
 * 'reply' with an error reply to the refresh alone (the session renewals beside it run).
 */
function spyRefreshes(backend: RedisBackend, fail: () => 'trip' | 'reply' | null = () => null) {
  const adapter = backend.adapter as { run: RedisBackend['adapter']['run'] };
  const run = adapter.run.bind(adapter);
  const sent: boolean[] = [];
  adapter.run = async (calls) => {
    const refresh = calls.some((c) => c.script === REFRESH_MANY);
    sent.push(refresh);
    const how = refresh ? fail() : null;
    if (how === 'trip') throw new BackendError('redis: read ECONNRESET (injected)');
    if (how !== 'reply') return run(calls);
    const res = await run(calls.filter((c) => c.script !== REFRESH_MANY));
    return calls.map((c) => (c.script === REFRESH_MANY ? new BackendError('redis: ERR (injected)') : res.shift()));
  };
  return sent;
}

/** Renews `session` every 100 ms (as the engine would, a few times per TTL) until a round trip carried a refresh. */
async function renewUntilRefresh(b: RedisBackend, session: string, sent: boolean[]) {
  for (;;) {
    await new Promise((r) => setTimeout(r, 100));
    const n = sent.length;
    const res = await b.renewSessions!([session]);
    if (sent.length > n && sent.at(-1)) return res;
    expect(res).toEqual([{ ok: true, lost: [] }]);
  }
}

describe('redis session mode', () => {
  test('the option is checked before any I/O; a Redis Cluster client is refused (it keeps per-master renewal)', async () => {
    const c = await clients.make('ioredis');
    expect(() => redis(c, { session: 'yes' as never })).toThrow(InvalidArgumentError);
    const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
    try {
      expect(() => redis(cluster, { session: true })).toThrow(/Cluster/);
      expect(() => redis(cluster, { session: true })).toThrow(InvalidArgumentError);
      expect(redis(cluster).renewSessions).toBeUndefined();
    } finally {
      cluster.disconnect();
    }
    expect(redis(c).renewSessions).toBeUndefined(); // per-lease renewal is the default
    expect(typeof redis(c, { session: true }).renewSessions).toBe('function');
  });

  test('a holder SIGSTOPped past its TTL loses all of its locks at once; the next holders get higher fences; resumed, it is told', async () => {
    const TTL = 1000;
    const keys = Array.from({ length: 20 }, (_, i) => `stop-${i}`);
    const c = child('hold', REDIS_URL, prefix, keys.map((k) => `${k}:${TTL}`).join(','));
    const held = await c.next('held');
    const admin = await clients.make('ioredis');
    // all 20 hang off one session key
    expect(new Set(Object.values(held.sessions)).size).toBe(1);
    const session = Object.values(held.sessions)[0] as string;
    // renewal keeps them for more than two TTLs while the holder runs
    const other = await locksOn({ ttl: 5000 });
    await new Promise((r) => setTimeout(r, 2.5 * TTL));
    for (const k of keys) expect(await other.tryAcquire(k), `${k} was free while its holder ran`).toBeNull();
    expect(c.msgs.filter((m) => m.kind === 'lost')).toEqual([]);

    c.p.kill('SIGSTOP');
    const stoppedAt = performance.now();
    const got: { key: string; lease: Lease; at: number }[] = await Promise.all(
      keys.map(async (key) => {
        const lease = await other.acquire(key, { wait: '10s' });
        return { key, lease, at: performance.now() - stoppedAt };
      }),
    );
    expect(await admin.exists(session)).toBe(0);
    for (const g of got) {
      // never before its TTL (the session's expiry was set by a renewal before the stop) ...
      expect(g.at).toBeGreaterThanOrEqual(TTL - 2 * (TTL / 3) - 50);
      // ... and promptly after it: a waiter re-checks within a second even with nobody to tell it
      expect(g.at, `${g.key} came ${Math.round(g.at)} ms after the stop`).toBeLessThan(TTL + 1000 + 700);
      expect(g.lease.fence > BigInt(held.fences[g.key])).toBe(true);
    }
    const spread = Math.max(...got.map((g) => g.at)) - Math.min(...got.map((g) => g.at));
    console.log(
      `[session] 20 locks freed by one lapsed session: first ${Math.round(Math.min(...got.map((g) => g.at)))} ms, spread ${Math.round(spread)} ms after the stop`,
    );

    c.p.kill('SIGCONT');
    expect(await until(() => c.msgs.filter((m) => m.kind === 'lost').length === keys.length, 5000)).toBe(true);
    expect(new Set(c.msgs.filter((m) => m.kind === 'lost').map((m) => m.key))).toEqual(new Set(keys));
    // the new holder still holds every lock: the resumed process took nothing back
    for (const g of got) expect((await other.inspect(g.key))?.fence).toBe(g.lease.fence);
    expect(await admin.exists(session)).toBe(0); // a lapsed session key is never created again
  }, 60_000);

  test('leases of different TTLs keep their own expiry (one session key per TTL)', async () => {
    const c = child('hold', REDIS_URL, prefix, 'short:800,long:4000');
    const held = await c.next('held');
    expect(held.sessions.short).not.toBe(held.sessions.long);
    const admin = await clients.make('ioredis');
    expect(await admin.pttl(held.sessions.short)).toBeLessThanOrEqual(800);
    expect(await admin.pttl(held.sessions.long)).toBeGreaterThan(800);
    c.p.kill('SIGSTOP');
    const stoppedAt = performance.now();
    const other = await locksOn({ ttl: 10_000 });
    const short = await other.acquire('short', { wait: '10s' });
    const shortAt = performance.now() - stoppedAt;
    expect(short.fence > BigInt(held.fences.short)).toBe(true);
    // the long one is still held, well past the short TTL (its session was renewed ≤ 4000/3 ago)
    expect(await until(() => performance.now() - stoppedAt > 1500, 5000)).toBe(true);
    expect(await other.tryAcquire('long')).toBeNull();
    const long = await other.acquire('long', { wait: '10s' });
    const longAt = performance.now() - stoppedAt;
    expect(long.fence > BigInt(held.fences.long)).toBe(true);
    expect(longAt).toBeGreaterThanOrEqual(4000 - 4000 / 3 - 50);
    expect(longAt).toBeLessThan(4000 + 1000 + 700);
    console.log(
      `[session] short (800 ms) free after ${Math.round(shortAt)} ms, long (4 s) after ${Math.round(longAt)} ms`,
    );
  }, 60_000);

  test("runExclusive's lockAtLeastFor window outlives the holder's SIGKILL", async () => {
    const AT_LEAST = 2500;
    const c = child('exclusive', REDIS_URL, prefix, 'job', String(AT_LEAST), '20000');
    const t0 = performance.now(); // before the grant
    expect((await c.next('ran')).ran).toBe(true);
    c.p.kill('SIGKILL');
    const admin = await clients.make('ioredis');
    // its own expiry, on no session: the window is the lock's PX
    const v: string | null = await admin.get(lockKey('job'));
    expect(v).not.toBeNull();
    expect(v!.includes('|')).toBe(false);
    const other = await locksOn();
    expect(await until(() => performance.now() - t0 > 1200, 5000)).toBe(true);
    expect(await other.tryAcquire('job'), 'the window ended with the process').toBeNull();
    const next = await other.acquire('job', { wait: '10s' });
    const at = performance.now() - t0;
    expect(at).toBeGreaterThanOrEqual(AT_LEAST - 100);
    expect(at).toBeLessThan(20_000); // never lockAtMostFor
    await next.release();
  }, 60_000);

  test('a stale token can neither extend, nor release, nor write a result once its session lapsed', async () => {
    const c = await clients.make('ioredis');
    const b = redis(c, { session: true });
    const key = `${prefix}:stale`;
    const token = randomBytes(16).toString('base64url');
    const g = await b.acquire(key, { token, ttlMs: 400, renew: true });
    expect(g?.session).toBeDefined();
    expect(await b.results.put(key, token, 'early', 10_000)).toBe(true); // while it lives
    // nobody renews the session: it lapses (the lock key itself is still there, with a long PX)
    expect(await until(async () => (await c.exists(g!.session!)) === 0, 5000)).toBe(true);
    expect(await c.exists(lockKey('stale'))).toBe(1);
    // it does not pile up: its own PX is bounded (10 min), and the first script that meets it deletes it
    const px = await c.pttl(lockKey('stale'));
    expect(px).toBeGreaterThan(0);
    expect(px).toBeLessThanOrEqual(600_000);
    expect(await b.inspect(key)).toBeNull();
    expect(await b.extend([{ key, token, ttlMs: 10_000 }])).toEqual([false]);
    expect(await b.results.put(key, token, 'late', 10_000)).toBe(false);
    expect(await b.results.get(key)).toBe('early');
    expect(await b.renewSessions!([g!.session!])).toEqual([{ ok: false, lost: [] }]);
    expect(await c.exists(g!.session!)).toBe(0); // renewal never brings it back
    expect(await b.release(key, token)).toBe(false);
    expect(await c.exists(lockKey('stale'))).toBe(0); // reaped (and announced as a release)
    // the lock was free all along; the next grant has a higher fence, on a new session
    const token2 = randomBytes(16).toString('base64url');
    const g2 = await b.acquire(key, { token: token2, ttlMs: 400, renew: true });
    expect(g2!.fence > g!.fence).toBe(true);
    expect(g2!.session).not.toBe(g!.session);
    expect(await b.release(key, token2)).toBe(true);
    await b.close();
  });

  test("a client's keyPrefix: the lock's long PX is refreshed (its value names the prefixed session key)", async () => {
    const kp = 'kp:';
    const admin = await clients.make('ioredis');
    const b = shortPx(await clients.make('ioredis', REDIS_URL, { keyPrefix: kp }), 3000);
    const sent = spyRefreshes(b);
    const key = `${prefix}:kp`;
    const token = randomBytes(16).toString('base64url');
    const g = await b.acquire(key, { token, ttlMs: 1000, renew: true });
    expect(await admin.get(`${kp}${lockKey('kp')}`)).toBe(`${token}|${kp}${g!.session}`);
    // the refresh is due a third of the PX (1 s) after the grant; it finds the lock as it was
    expect(await renewUntilRefresh(b, g!.session!, sent)).toEqual([{ ok: true, lost: [] }]);
    expect(await admin.pttl(`${kp}${lockKey('kp')}`)).toBeGreaterThan(2500);
    expect(await b.release(key, token)).toBe(true);
    await b.close();
  });

  test('a refresh whose round trip failed is sent again at the next renewal, not a third of the PX later', async () => {
    const admin = await clients.make('ioredis');
    const b = shortPx(await clients.make('ioredis'), 3000);
    let failing = true;
    const sent = spyRefreshes(b, () => (failing ? 'trip' : null));
    const key = `${prefix}:retry`;
    const token = randomBytes(16).toString('base64url');
    const g = await b.acquire(key, { token, ttlMs: 1000, renew: true });
    await expect(renewUntilRefresh(b, g!.session!, sent)).rejects.toThrow(/injected/);
    failing = false;
    await admin.pexpire(lockKey('retry'), 1000); // shows whether the next renewal refreshed it
    expect(await b.renewSessions!([g!.session!])).toEqual([{ ok: true, lost: [] }]);
    expect(sent.slice(-2)).toEqual([true, true]); // the failed refresh went again with the next renewal
    expect(await admin.pttl(lockKey('retry'))).toBeGreaterThan(2500);
    // once confirmed, it is due only a third of the PX later
    expect(await b.renewSessions!([g!.session!])).toEqual([{ ok: true, lost: [] }]);
    expect(sent.at(-1)).toBe(false);
    expect(await b.release(key, token)).toBe(true);
    await b.close();
  });

  test("a lease whose lock's PX was not refreshed in time is lost, although its session lives", async () => {
    const b = shortPx(await clients.make('ioredis'), 1500);
    const sent = spyRefreshes(b, () => 'reply');
    const key = `${prefix}:nopx`;
    const token = randomBytes(16).toString('base64url');
    const t0 = performance.now();
    const g = await b.acquire(key, { token, ttlMs: 500, renew: true });
    // the engine never counts it valid past the PX (minus drift) from its grant's send
    const bound = b.validUntil!(key, token)!;
    expect(bound).toBeGreaterThan(t0 + 1400);
    expect(bound).toBeLessThanOrEqual(performance.now() + 1500);
    // every refresh fails (the session renewals beside it go through); none confirms anything
    await expect(renewUntilRefresh(b, g!.session!, sent)).rejects.toThrow(/injected/);
    while (performance.now() < bound) {
      expect(b.validUntil!(key, token)).toBe(bound);
      await b.renewSessions!([g!.session!]).catch(() => {});
      await new Promise((r) => setTimeout(r, 100));
    }
    // past the bound, the next renewal (of the session alone) reports the lease lost
    const n = sent.length;
    expect(await b.renewSessions!([g!.session!])).toEqual([{ ok: true, lost: [token] }]);
    expect(sent.slice(n)).toEqual([false]);
    expect(b.validUntil!(key, token)).toBeUndefined();
    await b.close();
  });

  test('a lease extended by itself leaves its session: its own PX, renewed by itself, kept when the session ends', async () => {
    const a = await locksOn({ ttl: 900 });
    const lease = await a.acquire('alone');
    const other = await a.acquire('other');
    const admin = await clients.make('ioredis');
    const session = (await admin.get(lockKey('alone')))!.split('|')[1]!;
    await lease.extend('5s');
    expect(await admin.get(lockKey('alone'))).not.toContain('|');
    expect(await admin.pttl(lockKey('alone'))).toBeGreaterThan(900);
    await admin.del(session); // ends the session: 'other' is lost, 'alone' is not
    await new Promise<void>((r) => other.signal.addEventListener('abort', () => r(), { once: true }));
    expect(lease.held).toBe(true);
    const b = await locksOn();
    expect(await b.tryAcquire('alone')).toBeNull();
    expect(await b.tryAcquire('other')).not.toBeNull();
    expect(await lease.release()).toBe(true);
  });

  test('a session key deleted by hand frees all of its locks; every holder is told at the next renewal', async () => {
    const a = await locksOn({ ttl: 900 }); // renewal every 300 ms
    const keys = Array.from({ length: 10 }, (_, i) => `evict-${i}`);
    const leases = await Promise.all(keys.map((k) => a.acquire(k)));
    const admin = await clients.make('ioredis');
    const v: string = (await admin.get(lockKey(keys[0]!)))!;
    const session = v.split('|')[1]!;
    const b = await locksOn({ ttl: 900 });
    const waiting = b.acquire(keys[3]!, { wait: '5s' });
    waiting.catch(() => {}); // may reject before it is awaited below
    const lostAll = Promise.all(
      leases.map(
        (l) =>
          new Promise<number>((r) => l.signal.addEventListener('abort', () => r(performance.now()), { once: true })),
      ),
    );
    const t0 = performance.now();
    await admin.del(session);
    // free at once: inspect and list no longer show them (but evict-3, which the waiter may have taken already)
    const rest = keys.filter((k) => k !== keys[3]);
    for (const k of rest) expect(await b.inspect(k)).toBeNull();
    const listed: { key: string; fence: bigint }[] = [];
    for await (const i of b.list('evict-')) listed.push(i);
    for (const i of listed) {
      expect(i.key).toBe(keys[3]);
      expect(i.fence > leases[3]!.fence).toBe(true);
    }
    const lostAt = await lostAll;
    for (const l of leases) {
      expect(l.signal.reason).toBeInstanceOf(LeaseLostError);
      expect(l.held).toBe(false);
    }
    expect(Math.max(...lostAt) - t0).toBeLessThanOrEqual(300 + 300);
    const next = await waiting;
    expect(next.fence > leases[3]!.fence).toBe(true);
    expect(performance.now() - t0).toBeLessThan(1500);
    // the holder's own releases found nothing: the lost leases said so
    expect(await leases[0]!.release()).toBe(false);
    // and the holder's next lease of that TTL hangs off a new session
    const again = await a.acquire('evict-again');
    expect((await admin.get(lockKey('evict-again')))!.split('|')[1]).not.toBe(session);
    await again.release();
  });
});
