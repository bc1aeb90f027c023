/** Session mode against the real server, with both client libraries. */
import { createHash, randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { createLocks, LeaseLostError } from '../../src/index.js';
import { advisoryKey, lockParts, postgres } from '../../src/backends/postgres/index.js';
import { BackendError, InvalidArgumentError } from '../../src/errors.js';
import { KINDS, Pg, type ClientKind } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());

const uid = () => randomUUID().slice(0, 8);
const aborted = (s: AbortSignal) =>
  new Promise<unknown>((r) =>
    s.aborted ? r(s.reason) : s.addEventListener('abort', () => r(s.reason), { once: true }),
  );

/** Connections checked out of the user's client and not given back (0 = baseline). */
async function inUse(kind: ClientKind, client: any, max: number): Promise<number> {
  if (kind === 'pg') return client.totalCount - client.idleCount;
  // postgres.js exposes no counts: a leaked reservation would make reserving all `max` hang
  const all = Promise.all(Array.from({ length: max }, () => client.reserve()));
  const timer = new Promise<null>((r) => setTimeout(() => r(null), 3000));
  const got = await Promise.race([all, timer]);
  if (!got) return -1;
  for (const r of got as any[]) r.release();
  return 0;
}

test('the advisory key is the first 8 bytes of SHA-256, as the server computes it and pg_locks shows it', async () => {
  const admin = await env.admin();
  for (const key of ['leasehold:order:42', 'leasehold:ключ:🔒', `leasehold:${'x'.repeat(1000)}`]) {
    const mine = advisoryKey(key);
    expect(mine).toBe(createHash('sha256').update(key).digest().readBigInt64BE(0));
    const r = await admin.query(
      `select ('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint::text as k`,
      [key],
    );
    expect(r.rows[0].k).toBe(mine.toString());
  }
  const key = `leasehold:${uid()}`;
  const b = await env.backend('pg');
  await b.acquire(key, { token: 't'.repeat(24), ttlMs: 5000 });
  const { classid, objid } = lockParts(advisoryKey(key));
  const r = await admin.query(
    `select classid::text, objid::text, objsubid from pg_locks where locktype = 'advisory' and pid = any($1::int4[])`,
    [await env.holders(key)],
  );
  expect(r.rows).toEqual([{ classid, objid, objsubid: 1 }]);
  await b.close();
});

test('postgres() rejects bad clients and options before any I/O', () => {
  expect(() => postgres({} as never)).toThrow(InvalidArgumentError);
  expect(() => postgres(null as never)).toThrow(InvalidArgumentError);
  const fakePool = { connect() {}, query() {}, totalCount: 0 };
  expect(() => postgres(fakePool, { schema: 'bad"name' })).toThrow(InvalidArgumentError);
  expect(() => postgres(fakePool, { channel: 'a b' })).toThrow(InvalidArgumentError);
  expect(() => postgres(fakePool, { timeout: 'soon' })).toThrow(InvalidArgumentError);
  expect(() => postgres(fakePool, { migrate: 'yes' } as never)).toThrow(InvalidArgumentError);
  expect(() => postgres(fakePool, { colour: 'red' } as never)).toThrow(InvalidArgumentError);
});

describe.each(KINDS)('session mode (%s)', (kind) => {
  test('acquire bumps the fence only when granted; a refused attempt writes nothing', async () => {
    const key = `leasehold:${uid()}`;
    const [a, b] = [await env.backend(kind), await env.backend(kind)];
    const g1 = await a.acquire(key, { token: 'holder-a-token-000000000', ttlMs: 5000 });
    expect(g1).toEqual({ fence: 1n });
    for (let i = 0; i < 20; i++) expect(await b.acquire(key, { token: `b${i}`, ttlMs: 5000 })).toBeNull();
    const admin = await env.admin();
    const row = await admin.query('select fence::text from leasehold_fences where key = $1', [key]);
    expect(row.rows).toEqual([{ fence: '1' }]);
    expect(await a.release(key, 'holder-a-token-000000000')).toBe(true);
    expect(await b.acquire(key, { token: 'b-final', ttlMs: 5000 })).toEqual({ fence: 2n });
    await Promise.all([a.close(), b.close()]);
  });

  test('a wrong token neither releases nor extends; inspect never shows the token', async () => {
    const key = `leasehold:${uid()}`;
    const a = await env.backend(kind);
    const token = 'the-real-token-000000000';
    const g = await a.acquire(key, { token, ttlMs: 5000 });
    expect(await a.release(key, 'wrong')).toBe(false);
    expect(await a.extend([{ key, token: 'wrong', ttlMs: 5000 }])).toEqual([false]);
    expect(await env.holders(key)).toHaveLength(1);
    const info = await a.inspect!(key);
    expect(info).toEqual({ key, fence: g!.fence, remainingMs: -1 });
    expect(JSON.stringify(info, (_, v) => (typeof v === 'bigint' ? String(v) : v))).not.toContain(token);
    expect(await a.extend([{ key, token, ttlMs: 5000 }])).toEqual([true]);
    expect(await a.release(key, token)).toBe(true);
    expect(await a.inspect!(key)).toBeNull();
    expect(await env.holders(key)).toHaveLength(0);
    await a.close();
  });

  test('pg_terminate_backend on the holder: signal aborts, onLost fires, extend is false, next holder gets a higher fence', async () => {
    const key = uid();
    const b = await env.backend(kind);
    const reports: Array<[string, string]> = [];
    b.onLost!((k, t) => reports.push([k, t]));
    const locks = createLocks(b, { prefix: 'leasehold', ttl: '30s' });
    const lease = await locks.acquire(key);
    const pids = await env.holders(`leasehold:${key}`);
    expect(pids).toHaveLength(1);
    const t0 = performance.now();
    await (await env.admin()).query('select pg_terminate_backend($1::int4)', [pids[0]]);
    const reason = await aborted(lease.signal);
    expect(performance.now() - t0).toBeLessThan(2000); // reported by the connection, not a 10s probe
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect(reports).toEqual([[`leasehold:${key}`, lease.token]]);
    expect(await b.extend([{ key: `leasehold:${key}`, token: lease.token, ttlMs: 30_000 }])).toEqual([false]);
    expect(await lease.release()).toBe(false);
    const other = createLocks(await env.backend(kind), { prefix: 'leasehold' });
    const next = await other.acquire(key, { wait: '5s' });
    expect(next.fence).toBeGreaterThan(lease.fence);
    await Promise.all([locks.close(), other.close()]);
  });

  test('connections are back at baseline after 1,000 acquire/release cycles and after lost leases', async () => {
    const max = 8;
    const client = await env.client(kind, max);
    const b = postgres(client);
    const key = `leasehold:${uid()}`;
    let last = 0n;
    for (let i = 0; i < 1000; i++) {
      const g = await b.acquire(key, { token: `t${i}`, ttlMs: 5000, queue: i % 2 === 0 });
      expect(g).not.toBeNull();
      expect(g!.fence).toBeGreaterThan(last);
      last = g!.fence;
      expect(await b.release(key, `t${i}`)).toBe(true);
    }
    expect(await inUse(kind, client, max)).toBe(0);
    // five leases lost to pg_terminate_backend
    const lost: string[] = [];
    b.onLost!((k) => lost.push(k));
    const keys = Array.from({ length: 5 }, () => `leasehold:${uid()}`);
    for (const k of keys) expect(await b.acquire(k, { token: 'x', ttlMs: 30_000 })).not.toBeNull();
    if (kind === 'pg') expect(await inUse(kind, client, max)).toBe(5);
    const admin = await env.admin();
    for (const k of keys) await admin.query('select pg_terminate_backend($1::int4)', [(await env.holders(k))[0]]);
    while (lost.length < 5) await new Promise((r) => setImmediate(r));
    expect(new Set(lost)).toEqual(new Set(keys));
    expect(await inUse(kind, client, max)).toBe(0);
    await b.close();
    expect(await inUse(kind, client, max)).toBe(0);
  });

  test('a release wakes a waiter by NOTIFY; a release it missed does not make it wait', async () => {
    const key = `leasehold:${uid()}`;
    const [a, b] = [await env.backend(kind), await env.backend(kind)];
    const never = new AbortController().signal;
    // warm-up: b subscribes on its first failed, queued attempt
    await a.acquire(key, { token: 'a1', ttlMs: 5000 });
    expect(await b.acquire(key, { token: 'b', ttlMs: 5000, queue: true })).toBeNull();
    await b.waitForChange!(key, never, 5000);
    expect(await b.acquire(key, { token: 'b', ttlMs: 5000, queue: true })).toBeNull();
    // pushed: the wait ends on the release, long before its 10s bound
    const woke = b.waitForChange!(key, never, 10_000).then(() => performance.now());
    const t0 = performance.now();
    await a.release(key, 'a1');
    expect((await woke) - t0).toBeLessThan(500);
    expect(await b.acquire(key, { token: 'b', ttlMs: 5000, queue: true })).not.toBeNull();
    // missed: b releases after a's failed attempt, and a sees the NOTIFY before it starts waiting
    expect(await a.acquire(key, { token: 'a2', ttlMs: 5000, queue: true })).toBeNull();
    await a.waitForChange!(key, never, 5000); // a subscribes: returns once live (its attempt predates it)
    expect(await a.acquire(key, { token: 'a2', ttlMs: 5000, queue: true })).toBeNull();
    const seen = (a as any).notifier.notified as Map<string, number>; // white box: a's record of NOTIFYs
    const lockKey = advisoryKey(key).toString();
    const before = seen.get(lockKey);
    await b.release(key, 'b');
    while (seen.get(lockKey) === before) await new Promise((r) => setImmediate(r));
    const t1 = performance.now();
    await a.waitForChange!(key, never, 10_000); // the failed attempt's wait returns at once
    expect(performance.now() - t1).toBeLessThan(100);
    expect(await a.acquire(key, { token: 'a2', ttlMs: 5000, queue: true })).not.toBeNull();
    await Promise.all([a.close(), b.close()]);
  });

  test('an aborted or closed wait returns early and never rejects', async () => {
    const b = await env.backend(kind);
    const ctrl = new AbortController();
    const w = b.waitForChange!(`leasehold:${uid()}`, ctrl.signal, 60_000);
    ctrl.abort(new Error('stop'));
    await expect(w).resolves.toBeUndefined();
    const w2 = b.waitForChange!(`leasehold:${uid()}`, new AbortController().signal, 60_000);
    await b.close();
    await expect(w2).resolves.toBeUndefined();
    await expect(b.acquire(`leasehold:${uid()}`, { token: 't', ttlMs: 1000 })).rejects.toBeInstanceOf(BackendError);
  });

  test('a lock neither extended nor released is let go when its TTL runs out, also after close()', async () => {
    const max = 4;
    const client = await env.client(kind, max);
    const b = postgres(client);
    const key = `leasehold:${uid()}`;
    const t0 = performance.now();
    expect(await b.acquire(key, { token: 't', ttlMs: 400 })).not.toBeNull();
    await b.close(); // the window is kept: someone else cannot take it yet
    const other = await env.backend(kind);
    expect(await other.acquire(key, { token: 'o', ttlMs: 5000 })).toBeNull();
    while ((await other.acquire(key, { token: 'o', ttlMs: 5000, queue: true })) === null) {
      await other.waitForChange!(key, new AbortController().signal, 2000);
    }
    expect(performance.now() - t0).toBeGreaterThanOrEqual(390);
    // b hands its connection back when its unlock's reply arrives (the NOTIFY may overtake it)
    const until = performance.now() + 2000;
    while ((await inUse(kind, client, max)) !== 0 && performance.now() < until)
      await new Promise((r) => setImmediate(r));
    expect(await inUse(kind, client, max)).toBe(0);
    await other.close();
  });

  test('a statement that fails after the lock was granted leaves no lock on the pooled connection', async () => {
    const schema = `lh_${uid()}`;
    const max = 4;
    const client = await env.client(kind, max);
    const b = postgres(client, { schema });
    const key = `leasehold:${uid()}`;
    expect(await b.acquire(key, { token: 't', ttlMs: 5000 })).toEqual({ fence: 1n });
    expect(await b.release(key, 't')).toBe(true);
    const admin = await env.admin();
    // the upsert fails after pg_try_advisory_lock granted the lock in the same statement
    await admin.query(`create function "${schema}".boom() returns trigger language plpgsql as $$
      begin raise exception 'boom'; end $$`);
    await admin.query(`create trigger boom before update on "${schema}".leasehold_fences
      for each row execute function "${schema}".boom()`);
    await expect(b.acquire(key, { token: 't', ttlMs: 5000 })).rejects.toThrow(/boom/);
    expect(await env.holders(key)).toEqual([]);
    expect(await inUse(kind, client, max)).toBe(0);
    await admin.query(`drop trigger boom on "${schema}".leasehold_fences`);
    expect(await b.acquire(key, { token: 't', ttlMs: 5000 })).toEqual({ fence: 2n }); // the failed bump rolled back
    expect(await b.release(key, 't')).toBe(true);
    // the tables vanish: a clear error, nothing leaked, and they are re-created on the next use
    await admin.query(`drop schema "${schema}" cascade`);
    await expect(b.acquire(key, { token: 't', ttlMs: 5000 })).rejects.toBeInstanceOf(BackendError);
    expect(await inUse(kind, client, max)).toBe(0);
    expect(await b.acquire(key, { token: 't', ttlMs: 5000 })).toEqual({ fence: 1n });
    expect(await b.release(key, 't')).toBe(true);
    await b.close();
    await admin.query(`drop schema "${schema}" cascade`);
  });
});
