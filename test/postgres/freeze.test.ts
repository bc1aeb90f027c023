/**
 * PostgreSQL that stops answering (issue #9), behind a TCP relay that freezes (a half-open
 * network, no mocks): with pg and postgres.js on their defaults, every call settles by its
 * bound, close() too. And issue #9.2: a call in flight during close() rejects with
 * LEASEHOLD_CLOSED, and what it got is released before close() returns.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import postgresJs from 'postgres';
import { afterAll, describe, expect, test } from 'vitest';
import { postgres } from '../../src/backends/postgres/index.js';
import { ClosedError, createLocks, fromUrl } from '../../src/index.js';
import { expectBoundsWhileFrozen, OP, SHORT_TTL } from '../support/freeze.js';
import { Relay } from './proxy.js';
import { KINDS, Pg, PG_URL, type ClientKind } from './support.js';

const env = new Pg();
const relays: Relay[] = [];
const ends: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  await Promise.allSettled(relays.map((r) => r.close()));
  await Promise.allSettled(ends.map((e) => e()));
  await env.closeAll();
});

/**
 * A client on the relay, as a user would make it (the clients' defaults), except postgres.js's
 * `fetch_types`: on every new connection postgres.js runs its own array-type query from inside its
 * socket handler, with nobody awaiting it; a connection cut during that query (this test cuts
 * them) rejects it unhandled, inside postgres.js. Turning it off is what docs/postgres.md advises.
 */
function clientOn(kind: ClientKind, url: string): any {
  if (kind === 'pg') {
    const pool = new pg.Pool({ connectionString: url, max: 6 });
    pool.on('error', () => {});
    ends.push(() => pool.end());
    return pool;
  }
  const sql = postgresJs(url, { max: 6, onnotice: () => {}, fetch_types: false });
  ends.push(() => sql.end({ timeout: 1 }));
  return sql;
}

describe.each(KINDS)('postgres with %s', (kind) => {
  test('network frozen: every call settles by its bound (the backend’s own timeout is 10s)', async () => {
    const relay = await new Relay().start();
    relays.push(relay);
    const locks = createLocks(postgres(clientOn(kind, relay.url)), {
      prefix: `fz-${randomUUID().slice(0, 8)}`,
      opTimeout: OP,
      ttl: '10s',
    });
    const held = await locks.acquire('held');
    const short = await locks.acquire('short', { ttl: SHORT_TTL });
    await locks.tryAcquire('warm').then((l) => l?.release()); // a pooled connection waits idle
    relay.freeze();
    await expectBoundsWhileFrozen(locks, held, short);
    relay.cut(); // the server sees the connections go and ends their sessions
  });

  test('a call in flight during close() rejects with LEASEHOLD_CLOSED; its grant is released before close() returns', async () => {
    const prefix = `fz-close-${randomUUID().slice(0, 8)}`;
    const locks = createLocks(await env.backend(kind), { prefix });
    await locks.tryAcquire('warm').then((l) => l?.release()); // the fence table exists
    let ran = false;
    const work = locks.withLock('job', () => (ran = true)).catch((e: unknown) => e);
    const closing = locks.close(); // the acquire is on its way to the server
    const err = await work;
    expect(err).toBeInstanceOf(ClosedError);
    expect(err).toMatchObject({ code: 'LEASEHOLD_CLOSED' });
    await closing;
    expect(ran).toBe(false);
    expect(await env.holders(`${prefix}:job`)).toEqual([]);
  });
});

/** The server-side port of a server process's client socket (what the relay knows it by). */
async function clientPort(pid: number): Promise<number> {
  const r = await (await env.admin()).query('select client_port from pg_stat_activity where pid = $1', [pid]);
  return Number(r.rows[0]?.client_port);
}

/** The holders of `fullKey`'s lock once `done` says so of them, or after `ms` (as they are then). */
async function holdersOnce(fullKey: string, done: (pids: number[]) => boolean, ms: number): Promise<number[]> {
  const until = performance.now() + ms;
  for (;;) {
    const pids = await env.holders(fullKey);
    if (done(pids) || performance.now() > until) return pids;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.each(KINDS)('postgres with %s: a half-open session connection', (kind) => {
  test.each([
    ['a release', false],
    ['an acquire', true],
  ] as const)('%s that times out on it: the server session holding that lock is ended', async (what, answersOnly) => {
    const relay = await new Relay().start();
    relays.push(relay);
    const backend = postgres(clientOn(kind, relay.url), { timeout: '1s' });
    const prefix = `fz-half-${randomUUID().slice(0, 8)}`;
    const locks = createLocks(backend, { prefix });
    ends.push(() => locks.close().catch(() => {}));
    let lease = null;
    if (what === 'a release') lease = await locks.acquire('k');
    else await locks.tryAcquire('warm').then((l) => l?.release()); // the session is open
    const pid = backend.sessionPid!;
    // the network to that one connection goes silent (acquire: only the server's answers)
    expect(relay.blackhole(await clientPort(pid), answersOnly)).toBe(true);
    if (lease) expect(await lease.release()).toBe(false);
    else {
      const attempt = locks.tryAcquire('k');
      attempt.catch(() => {});
      // the server took the lock; now nothing reaches it either (postgres.js says goodbye first)
      expect(await holdersOnce(`${prefix}:k`, (p) => p.length > 0, 900)).toEqual([pid]);
      relay.blackhole(await clientPort(pid));
      await expect(attempt).rejects.toThrow(/acquire did not answer within 1000ms/);
    }
    expect(backend.sessionPid).toBe(null); // given up on
    // the lock (held by the server session, which may well be alive) is let go within a bound
    expect(await holdersOnce(`${prefix}:k`, (p) => p.length === 0, 3_000)).toEqual([]);
    const stillThere = await (await env.admin()).query('select 1 from pg_stat_activity where pid = $1', [pid]);
    expect(stillThere.rows).toEqual([]);
    relay.cut();
  });
});

test('fromUrl: a call in flight during close() is released before the pool it made is ended', async () => {
  const prefix = `fz-url-${randomUUID().slice(0, 8)}`;
  const locks = createLocks(await fromUrl(PG_URL), { prefix });
  await locks.tryAcquire('warm').then((l) => l?.release());
  const work = locks.acquire('job').catch((e: unknown) => e);
  await locks.close();
  expect(await work).toMatchObject({ code: 'LEASEHOLD_CLOSED' });
  expect(await env.holders(`${prefix}:job`)).toEqual([]);
});
