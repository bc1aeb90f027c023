/** Session mode against the real server, with both client libraries. */
import { createHash, randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test, vi } from 'vitest';
import { createLocks, LeaseLostError } from '../../src/index.js';
import { advisoryKey, lockParts, postgres } from '../../src/backends/postgres/index.js';
import { BackendError, InvalidArgumentError } from '../../src/errors.js';
import { KINDS, Pg, type ClientKind } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());

const uid = () => randomUUID().slice(0, 8);
/** Blocks this thread (the event loop with it) for `ms`: a GC pause or a busy synchronous section. */
const stall = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
const aborted = (s: AbortSignal) =>
  new Promise<unknown>((r) =>
    s.aborted ? r(s.reason) : s.addEventListener('abort', () => r(s.reason), { once: true }),
  );

/**
 * Counts the statements a backend sends from now on over the connections it holds now (its
 * session, spare and waiter connections): a spy on its private fields, for tests of what needs
 * no round trip.
 */
function statements(backend: unknown): () => number {
  const b = backend as {
    dedicated: { current: unknown };
    queue: { spares: unknown[]; waits: Map<string, { conn: unknown }> };
  };
  const { spares, waits } = b.queue;
  const conns = new Set([b.dedicated.current, ...spares, ...[...waits.values()].map((w) => w.conn)].filter((c) => !!c));
  let n = 0;
  for (const c of conns as Set<Record<string, (...a: unknown[]) => unknown>>) {
    for (const m of ['query', 'prepared']) {
      const orig = c[m]!.bind(c);
      c[m] = (...a: unknown[]) => (n++, orig(...a));
    }
  }
  expect(conns.size).toBeGreaterThan(0);
  return () => n;
}

/** Connections checked out of the user's client and not given back (0 = baseline). */
/** pg: connections checked out once the holder rows (written just after each grant) are in. */
async function settled(client: any): Promise<number> {
  for (let i = 0; i < 100 && client.totalCount - client.idleCount > 1; i++) await new Promise((r) => setTimeout(r, 10));
  return client.totalCount - client.idleCount;
}

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

test('advisory keys of recent keys are kept: every key still maps to its own hash after the oldest were dropped', () => {
  const sha = (k: string) => createHash('sha256').update(k).digest().readBigInt64BE(0);
  const keys = Array.from({ length: 3000 }, (_, i) => `leasehold:recent:${i}`);
  for (let round = 0; round < 2; round++) for (const k of keys) expect(advisoryKey(k)).toBe(sha(k));
  for (let i = keys.length - 1; i >= 0; i -= 7) expect(advisoryKey(keys[i]!)).toBe(sha(keys[i]!));
});

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

test('a postgres.js reserved connection is refused by postgres() with a message that says so', async () => {
  const sql = await env.client('postgres.js', 2);
  const reserved = await sql.reserve();
  try {
    expect(() => postgres(reserved)).toThrow(/not a reserved connection/);
  } finally {
    reserved.release();
  }
});

test('a pool of one connection is refused before any I/O (the lock session would wait on itself)', async () => {
  const pool = await env.client('pg', 1);
  const sql = await env.client('postgres.js', 1);
  const before = pool.totalCount;
  for (const c of [pool, sql]) {
    expect(() => postgres(c)).toThrow(InvalidArgumentError);
    expect(() => postgres(c)).toThrow(/allows 1 connection.*max ≥ 2/);
  }
  expect(pool.totalCount - pool.idleCount).toBe(0); // no connection was taken
  expect(pool.totalCount).toBe(before);
  // two connections work: the session holds one, the schema check and holder rows use the other
  const two = await env.client('pg', 2);
  const locks = createLocks(postgres(two), { ttl: '10s' });
  const lease = await locks.tryAcquire(`pool-of-two-${uid()}`);
  expect(lease).not.toBeNull();
  expect((await locks.inspect(lease!.key))?.fence).toBe(lease!.fence);
  await lease!.release();
  await locks.close();
});

describe.each(KINDS)('session mode (%s)', (kind) => {
  test('acquire bumps the fence only when granted; a refused attempt writes nothing', async () => {
    const key = `leasehold:${uid()}`;
    // a schema of its own: one fence sequence that nothing else in the test run moves
    const schema = `lh_${uid()}`;
    const [a, b] = [await env.backend(kind, { schema }), await env.backend(kind, { schema })];
    const g1 = await a.acquire(key, { token: 'holder-a-token-000000000', ttlMs: 5000 });
    // a fence is (epoch << 40) + the next value of the schema's fence sequence
    expect(g1!.fence).toBe((1n << 40n) + 1n);
    for (let i = 0; i < 20; i++) expect(await b.acquire(key, { token: `b${i}`, ttlMs: 5000 })).toBeNull();
    const admin = await env.admin();
    // the holder row is written just after the grant, off its path
    const rowOf = () => admin.query(`select fence::text from "${schema}".leasehold_holders where key = $1`, [key]);
    for (let i = 0; i < 100 && (await rowOf()).rows.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect((await rowOf()).rows).toEqual([{ fence: String(g1!.fence) }]);
    expect(await a.release(key, 'holder-a-token-000000000')).toBe(true);
    expect(await b.acquire(key, { token: 'b-final', ttlMs: 5000 })).toEqual({ fence: g1!.fence + 1n });
    await Promise.all([a.close(), b.close()]);
    await admin.query(`drop schema "${schema}" cascade`);
  });

  test('a holder value with NUL is refused before any I/O (acquire, tryAcquire, withLock, elect, the driver); others are stored', async () => {
    const b = await env.backend(kind);
    const acquire = b.acquire.bind(b);
    let sent = 0;
    b.acquire = (...a) => (sent++, acquire(...a));
    const locks = createLocks(b, { ttl: '10s' });
    const key = `nul-value-${uid()}`;
    const value = 'host\u0000a';
    const refused = [
      () => locks.acquire(key, { value }),
      () => locks.tryAcquire(key, { value }),
      () => locks.withLock(key, async () => 1, { value }),
    ];
    for (const f of refused) {
      const e = await f().catch((x: unknown) => x);
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect((e as Error).message).toMatch(/value must not contain NUL/);
    }
    expect(() => locks.elect(`e-${key}`, { value })).toThrow(/elect: value must not contain NUL/);
    expect(sent).toBe(0); // the engine never called the driver
    await expect(acquire(`leasehold:${key}`, { token: 'direct-token-0000000000', ttlMs: 5000, value })).rejects.toThrow(
      InvalidArgumentError,
    );
    expect(await env.holders(`leasehold:${key}`)).toEqual([]); // nothing was locked
    // any other value (a control character too) is stored and read back with its fence
    const lease = await locks.acquire(key, { value: 'host\u0001a' });
    expect(await locks.inspect(key)).toMatchObject({ fence: lease.fence, value: 'host\u0001a' });
    await lease.release();
    await locks.close();
  });

  test('extend(2) is refused before any I/O; an extend(10) confirmed after its validity (a stall) rejects with LeaseLostError', async () => {
    const b = await env.backend(kind);
    const locks = createLocks(b, { ttl: '10s', renew: false });
    const lease = await locks.acquire(`tiny-extend-${uid()}`);
    const sent = statements(b);
    for (const ttl of [1, 2]) {
      await expect(lease.extend(ttl)).rejects.toThrow(/leaves no validity after the drift allowance/);
    }
    expect(sent()).toBe(0);
    expect(lease.held).toBe(true);
    // 10 ms leave 8 ms after the drift allowance; the client stalls for 30 ms while the probe is answered
    const extending = lease.extend(10).catch((x: unknown) => x);
    stall(30);
    const e = await extending;
    expect(e).toBeInstanceOf(LeaseLostError);
    expect((e as Error).message).toMatch(/extension to 10ms ran out before it was confirmed/);
    expect(lease.held).toBe(false);
    await locks.close();
  });

  test('a lease released before its holder row is due writes no row and leaves no timer behind', async () => {
    const schema = `lh_${uid()}`;
    const a = await env.backend(kind, { schema });
    const [k1, k2] = [`leasehold:${uid()}`, `leasehold:${uid()}`];
    const timer = () => (a as unknown as { rows: { timer: unknown } }).rows.timer;
    // the holder row is written RECORD_MS after a grant; nothing but microtasks runs between the
    // grant and the release below, so the timer cannot have fired yet
    await a.acquire(k1, { token: 'short-lived-000000000000', ttlMs: 5000 });
    expect(timer()).not.toBeNull();
    // the row leaves the pending set as release() is called, before its statement: checked then
    // (a round trip on a loaded machine can outlast RECORD_MS, and the timer would be gone anyway)
    const released1 = a.release(k1, 'short-lived-000000000000');
    // under contention most leases end this way: the flush does not run for them
    expect(timer()).toBeNull();
    expect(await released1).toBe(true);
    expect(timer()).toBeNull();
    // with another row still due, the timer stays for it. Two grants on one connection are two
    // round trips, and a loaded machine can take longer than RECORD_MS over one: the timer's clock
    // is the test's here (setTimeout only; the server and the rest of the clock are real), so both
    // rows are still due when k1 is released, however slow the round trips
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    let g2: Awaited<ReturnType<typeof a.acquire>> | undefined;
    try {
      await a.acquire(k1, { token: 'short-lived-111111111111', ttlMs: 5000 });
      g2 = await a.acquire(k2, { token: 'kept-222222222222222222', ttlMs: 5000 });
      const released = a.release(k1, 'short-lived-111111111111'); // k1's row leaves at once, no I/O first
      expect(timer()).not.toBeNull();
      expect(await released).toBe(true);
      expect(timer()).not.toBeNull();
    } finally {
      vi.useRealTimers();
    }
    await (a as unknown as { written(): Promise<void> }).written(); // the due row of k2, now
    const admin = await env.admin();
    const rows = await admin.query(`select key, fence::text from "${schema}".leasehold_holders order by key`);
    expect(rows.rows).toEqual([{ key: k2, fence: String(g2!.fence) }]);
    await a.close();
    await admin.query(`drop schema "${schema}" cascade`);
  });

  test('a grant from the server queue is taken after the pause without a statement (handedOver), once, by its token', async () => {
    const key = `leasehold:${uid()}`;
    const [a, b] = [await env.backend(kind), await env.backend(kind)];
    const g1 = await a.acquire(key, { token: 'holder-aaaaaaaaaaaaaaaa', ttlMs: 5000 });
    const req = { token: 'waiter-bbbbbbbbbbbbbbbb', ttlMs: 5000, queue: true, renew: true };
    expect(await b.acquire(key, req)).toBeNull(); // refused: it waits in the server's queue
    expect(b.handedOver!(key, req)).toBeNull(); // nothing granted yet
    const changed = b.waitForChange!(key, new AbortController().signal, 5000);
    const sent = statements(b);
    expect(await a.release(key, 'holder-aaaaaaaaaaaaaaaa')).toBe(true);
    await changed;
    const before = sent();
    // not for another token, nor for a caller whose holder value must be written first
    expect(b.handedOver!(key, { ...req, token: 'someone-else-cccccccccc' })).toBeNull();
    expect(b.handedOver!(key, { ...req, value: 'leader-b' })).toBeNull();
    const g2 = b.handedOver!(key, req);
    expect(g2 !== null && g2.fence > g1!.fence).toBe(true);
    expect(sent()).toBe(before); // taken with no round trip
    expect(b.handedOver!(key, req)).toBeNull(); // once
    // held: another backend is refused; the holder's token releases it
    expect(await a.acquire(key, { token: 'holder-dddddddddddddddd', ttlMs: 5000 })).toBeNull();
    expect(await b.release(key, req.token)).toBe(true);
    expect(sent()).toBeGreaterThan(before); // (the spy sees the release's statement)
    const g3 = await a.acquire(key, { token: 'holder-eeeeeeeeeeeeeeee', ttlMs: 5000 });
    expect(g3 !== null && g3.fence > g2!.fence).toBe(true);
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

  test('one connection carries every lock: 20 held, the app’s queries on the same pool still run; a lost session loses them all', async () => {
    const max = 4;
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
    if (kind === 'pg') expect(await settled(client)).toBe(1); // the session, kept while in use
    const lost: string[] = [];
    b.onLost!((k) => lost.push(k));
    const keys = Array.from({ length: 20 }, () => `leasehold:${uid()}`);
    for (const k of keys) expect(await b.acquire(k, { token: 'x', ttlMs: 30_000 })).not.toBeNull();
    if (kind === 'pg') expect(await settled(client)).toBe(1);
    // the application's own queries on the same pool run, three at once
    const q = (text: string) => (kind === 'pg' ? client.query(text) : client.unsafe(text));
    const t0 = performance.now();
    await Promise.all([q('select pg_sleep(0.05)'), q('select pg_sleep(0.05)'), q('select pg_sleep(0.05)')]);
    expect(performance.now() - t0).toBeLessThan(2000);
    // a 21st key held elsewhere is refused at once (no pool wait)
    const other = await env.backend(kind);
    const busy = `leasehold:${uid()}`;
    expect(await other.acquire(busy, { token: 'o', ttlMs: 5000 })).not.toBeNull();
    const t1 = performance.now();
    expect(await b.acquire(busy, { token: 'y', ttlMs: 5000 })).toBeNull();
    expect(performance.now() - t1).toBeLessThan(2000);
    // every held lock sits on one server session
    const pids = new Set((await Promise.all(keys.map((k) => env.holders(k)))).flat());
    expect(pids.size).toBe(1);
    // that session ends: every lease on it is lost, each one signalled
    const admin = await env.admin();
    await admin.query('select pg_terminate_backend($1::int4)', [[...pids][0]]);
    while (lost.length < 20) await new Promise((r) => setTimeout(r, 5));
    expect(new Set(lost)).toEqual(new Set(keys));
    expect(await inUse(kind, client, max)).toBe(0);
    await b.close();
    expect(await inUse(kind, client, max)).toBe(0);
    await other.close();
  });

  test('a refused queued attempt waits in the server’s lock queue: the release wakes it alone, without NOTIFY', async () => {
    const key = `leasehold:${uid()}`;
    const [a, b] = [await env.backend(kind), await env.backend(kind)];
    const never = new AbortController().signal;
    const g1 = await a.acquire(key, { token: 'a1', ttlMs: 5000 });
    expect(await b.acquire(key, { token: 'b', ttlMs: 5000, queue: true })).toBeNull();
    // b's place: a second session of b waits for the lock in pg_locks (not granted)
    const admin = await env.admin();
    const { classid, objid } = lockParts(advisoryKey(key));
    const waiting = await admin.query(
      `select pid from pg_locks where locktype = 'advisory' and classid = $1::int8::oid and objid = $2::int8::oid
         and objsubid = 1 and not granted`,
      [classid, objid],
    );
    expect(waiting.rows.length).toBe(1);
    // a newcomer cannot barge: pg_try_advisory_lock is refused while someone waits
    const c = await env.backend(kind);
    expect(await a.release(key, 'a1')).toBe(true);
    expect(await c.acquire(key, { token: 'c', ttlMs: 5000 })).toBeNull();
    // the wait ends with the grant, long before its 10 s bound; the next attempt claims it
    const t0 = performance.now();
    await b.waitForChange!(key, never, 10_000);
    expect(performance.now() - t0).toBeLessThan(500);
    const g2 = await b.acquire(key, { token: 'b', ttlMs: 5000, queue: true });
    expect(g2!.fence > g1!.fence).toBe(true);
    expect((b as any).stats).toEqual({ queueGrants: 1, notifications: 0 });
    expect(await b.release(key, 'b')).toBe(true);
    // a waiter that gives up leaves the queue at once
    await a.acquire(key, { token: 'a2', ttlMs: 5000 });
    expect(await b.acquire(key, { token: 'b2', ttlMs: 5000, queue: true })).toBeNull();
    await b.leave!(key, 'b2');
    for (let i = 0; i < 100; i++) {
      const left = await admin.query(
        `select 1 from pg_locks where locktype = 'advisory' and classid = $1::int8::oid and objid = $2::int8::oid
           and objsubid = 1 and not granted`,
        [classid, objid],
      );
      if (left.rows.length === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await a.release(key, 'a2')).toBe(true);
    expect(await c.acquire(key, { token: 'c2', ttlMs: 5000 })).not.toBeNull();
    await Promise.all([a.close(), b.close(), c.close()]);
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
    // a closed backend says so (issue #9): LEASEHOLD_CLOSED, not LEASEHOLD_BACKEND
    await expect(b.acquire(`leasehold:${uid()}`, { token: 't', ttlMs: 1000 })).rejects.toMatchObject({
      code: 'LEASEHOLD_CLOSED',
    });
  });

  test('a lock neither extended nor released is let go when its TTL runs out; close() lets go of everything at once', async () => {
    const max = 4;
    const client = await env.client(kind, max);
    const b = postgres(client);
    const key = `leasehold:${uid()}`;
    const t0 = performance.now();
    expect(await b.acquire(key, { token: 't', ttlMs: 1500 })).not.toBeNull();
    const other = await env.backend(kind);
    expect(await other.acquire(key, { token: 'o', ttlMs: 5000 })).toBeNull();
    while ((await other.acquire(key, { token: 'o', ttlMs: 5000, queue: true })) === null) {
      await other.waitForChange!(key, new AbortController().signal, 2000);
    }
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1490);
    expect(await other.release(key, 'o')).toBe(true);
    // close() gives the session back at once, with nothing left on it
    expect(await b.acquire(key, { token: 't2', ttlMs: 60_000 })).not.toBeNull();
    const t1 = performance.now();
    await b.close();
    expect(performance.now() - t1).toBeLessThan(1000);
    expect(await inUse(kind, client, max)).toBe(0);
    expect(await other.acquire(key, { token: 'o2', ttlMs: 5000 })).not.toBeNull();
    await other.close();
  });

  test('a holder whose session is terminated is seen by a waiter in another process within about 1 s', async () => {
    const prefix = `lh-${uid()}`;
    const holder = createLocks(await env.backend(kind), { prefix, ttl: '30s' });
    const waiter = createLocks(await env.backend(kind), { prefix, ttl: '30s' });
    const lease = await holder.acquire('job');
    const waiting = waiter.acquire('job', { wait: '20s' }).then((l) => ({ l, at: performance.now() }));
    waiting.catch(() => {}); // may reject before it is awaited below
    await new Promise((r) => setTimeout(r, 300)); // the waiter is queued and waiting
    const [pid] = await env.holders(`${prefix}:job`);
    const t0 = performance.now();
    await (await env.admin()).query('select pg_terminate_backend($1::int4)', [pid]);
    const { l, at } = await waiting;
    const took = at - t0;
    console.log(`[${kind}] waiter in after the holder's pg_terminate_backend: ${took.toFixed(0)} ms`);
    expect(took).toBeLessThan(1500); // the server's queue hands the lock on as the session ends
    expect(l.fence > lease.fence).toBe(true);
    // the holder hears of its session's end from its connection (an error, then the close)
    for (let i = 0; i < 200 && lease.held; i++) await new Promise((r) => setTimeout(r, 5));
    expect(lease.held).toBe(false);
    await Promise.all([holder.close(), waiter.close()]);
  });

  test('close() after runExclusive with lockAtLeastFor returns at once; the window is kept in its row', async () => {
    const prefix = `lh-${uid()}`;
    const client = await env.client(kind, 2);
    const a = createLocks(postgres(client), { prefix });
    const b = createLocks(await env.backend(kind), { prefix });
    expect(await a.runExclusive('cron', () => 'ran', { lockAtLeastFor: '8s', lockAtMostFor: '1m' })).toEqual({
      ran: true,
      value: 'ran',
    });
    const t0 = performance.now();
    await a.close();
    await (kind === 'pg' ? client.end() : client.end({ timeout: 5 }));
    const closedIn = performance.now() - t0;
    console.log(`[${kind}] close() + pool end after an 8 s lockAtLeastFor window: ${closedIn.toFixed(0)} ms`);
    expect(closedIn).toBeLessThan(1000);
    expect(await b.tryAcquire('cron')).toBeNull(); // the window outlives the process's connections
    const info = await b.inspect('cron');
    expect(info!.remainingMs).toBeGreaterThan(5000);
    expect(info!.remainingMs).toBeLessThanOrEqual(8000);
    let listed = 0;
    for await (const x of b.list('')) if (x.key === 'cron') listed++;
    expect(listed).toBe(1);
    await b.close();
  });

  test('a statement that fails after the lock was granted leaves no lock on the pooled connection', async () => {
    const schema = `lh_${uid()}`;
    const max = 4;
    const client = await env.client(kind, max);
    const b = postgres(client, { schema });
    const key = `leasehold:${uid()}`;
    const first = (await b.acquire(key, { token: 't', ttlMs: 5000 }))!.fence;
    expect(await b.release(key, 't')).toBe(true);
    const admin = await env.admin();
    // the fence sequence runs out (NO CYCLE) after pg_try_advisory_lock granted the lock in the same statement
    await admin.query(`select setval('"${schema}".leasehold_fence_seq', (1::int8 << 40) - 1)`);
    await expect(b.acquire(key, { token: 't', ttlMs: 5000 })).rejects.toThrow(/maximum value/);
    expect(await env.holders(key, schema)).toEqual([]);
    await admin.query(`select setval('"${schema}".leasehold_fence_seq', 5)`);
    expect(await b.acquire(key, { token: 't', ttlMs: 5000 })).toEqual({ fence: first - 1n + 6n }); // setval(5): the next is 6
    expect(await b.release(key, 't')).toBe(true);
    // the tables vanish: a clear error, nothing leaked, and they are re-created on the next use
    await admin.query(`drop schema "${schema}" cascade`);
    await expect(b.acquire(key, { token: 't', ttlMs: 5000 })).rejects.toBeInstanceOf(BackendError);
    expect(await b.acquire(key, { token: 't', ttlMs: 5000 })).toEqual({ fence: (1n << 40n) + 1n }); // a new schema: epoch 1
    expect(await b.release(key, 't')).toBe(true);
    await b.close();
    await admin.query(`drop schema "${schema}" cascade`);
  });
});
