/**
 * The server settings of leasehold's own connections (the session and its waiter connections),
 * read on those very connections (a pg pool hands out its clients: the test asks them), whatever
 * the user's pool set.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { advisoryKey, lockParts, postgres } from '../../src/backends/postgres/index.js';
import { createLocks } from '../../src/index.js';
import { Pg } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());

/** The pool's clients as they are handed out (one is the session, others waiter connections). */
function handedOut(pool: pg.Pool): Map<number, pg.PoolClient> {
  const clients = new Map<number, pg.PoolClient>();
  pool.on('acquire', (c) => clients.set((c as unknown as { processID: number }).processID, c));
  return clients;
}

const SETTINGS = `select current_setting('tcp_keepalives_idle') as idle,
  current_setting('tcp_keepalives_interval') as interval, current_setting('tcp_keepalives_count') as count`;

test('the session connection sets TCP keepalives (idle: the lease’s TTL, 30 s by default; keepalive.test.ts)', async () => {
  const pool = await env.pool({ max: 3 });
  const clients = handedOut(pool);
  const backend = postgres(pool);
  const locks = createLocks(backend, { prefix: `set-${randomUUID().slice(0, 8)}` });
  try {
    await locks.acquire('k');
    const session = clients.get(backend.sessionPid!)!;
    expect((await session.query(SETTINGS)).rows[0]).toEqual({ idle: '30', interval: '1', count: '3' });
  } finally {
    await locks.close();
  }
});

/** Server pids waiting (not granted) in the queue of a namespaced key's advisory lock. */
async function waitingPids(fullKey: string): Promise<number[]> {
  const { classid, objid } = lockParts(advisoryKey(fullKey));
  const r = await (
    await env.admin()
  ).query(
    `select pid from pg_locks where locktype = 'advisory' and classid = $1::int8::oid and objid = $2::int8::oid
       and objsubid = 1 and not granted order by pid`,
    [classid, objid],
  );
  return r.rows.map((x) => Number(x.pid));
}

/** The waiting pids of `fullKey` once `done` says so of them (checked every 20 ms, up to 5 s). */
async function waitingOnce(fullKey: string, done: (pids: number[]) => boolean): Promise<number[]> {
  const until = performance.now() + 5_000;
  for (;;) {
    const pids = await waitingPids(fullKey);
    if (done(pids) || performance.now() > until) return pids;
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('a pool with statement_timeout: a waiter keeps its place in the queue (one server process), arrival order holds', async () => {
  const prefix = `set-st-${randomUUID().slice(0, 8)}`;
  const key = `${prefix}:k`;
  const timed = await env.pool({ max: 4, statement_timeout: 300 });
  const [H, W1, W2] = [
    createLocks(postgres(await env.pool({ max: 3 })), { prefix }),
    createLocks(postgres(timed), { prefix }),
    createLocks(postgres(await env.pool({ max: 3 })), { prefix }),
  ];
  try {
    const lease = await H.acquire('k');
    const order: string[] = [];
    const take = (name: string, locks: typeof H) =>
      locks.acquire('k', { wait: '10s' }).then(async (l) => {
        order.push(name);
        await l.release();
      });
    const first = take('W1', W1);
    first.catch(() => {});
    const [w1] = await waitingOnce(key, (p) => p.length === 1);
    const second = take('W2', W2);
    second.catch(() => {});
    const both = await waitingOnce(key, (p) => p.length === 2);
    // three of the pool's statement_timeouts later, W1 still waits on the same server process
    await new Promise((r) => setTimeout(r, 1_000));
    expect(await waitingPids(key)).toEqual(both);
    expect(both).toContain(w1);
    await lease.release();
    await Promise.all([first, second]);
    expect(order).toEqual(['W1', 'W2']);
  } finally {
    for (const l of [H, W1, W2]) await l.close();
  }
});

test('the session and waiter connections run none of the pool’s timeouts; given back, they have the pool’s again', async () => {
  const prefix = `set-to-${randomUUID().slice(0, 8)}`;
  const pool = await env.pool({ max: 3, statement_timeout: 2000, options: '-c idle_session_timeout=60000' });
  const clients = handedOut(pool);
  const backend = postgres(pool);
  const locks = createLocks(backend, { prefix });
  const other = createLocks(postgres(await env.pool({ max: 3 })), { prefix });
  const SHOW = `select current_setting('statement_timeout') as st, current_setting('idle_session_timeout') as ist`;
  try {
    const lease = await other.acquire('k');
    const waiting = locks.acquire('k', { wait: '10s' });
    const [waiter] = await waitingOnce(`${prefix}:k`, (p) => p.length === 1);
    await lease.release();
    const mine = await waiting; // granted on the waiter connection (asked once its wait is over)
    expect(waiter).not.toBe(backend.sessionPid);
    expect((await clients.get(waiter!)!.query(SHOW)).rows[0]).toEqual({ st: '0', ist: '0' });
    expect((await clients.get(backend.sessionPid!)!.query(SHOW)).rows[0]).toEqual({ st: '0', ist: '0' });
    await mine.release();
  } finally {
    await locks.close();
    await other.close();
  }
  // every connection is back in the pool with the pool's own settings
  const all = await Promise.all([pool.connect(), pool.connect(), pool.connect()]);
  for (const c of all) expect((await c.query(SHOW)).rows[0]).toEqual({ st: '2s', ist: '1min' });
  for (const c of all) c.release();
});

test('a wait cancelled on the server (57014, pg_cancel_backend) keeps its waiter connection: the wait goes on there', async () => {
  const prefix = `set-cx-${randomUUID().slice(0, 8)}`;
  const key = `${prefix}:k`;
  const H = createLocks(postgres(await env.pool({ max: 3 })), { prefix });
  const W = createLocks(postgres(await env.pool({ max: 4 })), { prefix });
  try {
    const lease = await H.acquire('k');
    const waiting = W.acquire('k', { wait: '10s' });
    waiting.catch(() => {});
    const [pid] = await waitingOnce(key, (p) => p.length === 1);
    await (await env.admin()).query('select pg_cancel_backend($1)', [pid]);
    // the caller's next attempt queues again, on the same (healthy) connection
    const again = await waitingOnce(key, (p) => p.length === 1 && p[0] === pid);
    expect(again).toEqual([pid]);
    await lease.release();
    await (await waiting).release();
  } finally {
    await H.close();
    await W.close();
  }
});
