/**
 * `tcp_user_timeout` of the connections leasehold uses, read on those very connections: the TCP
 * keepalive idle time + the probes (3 × 1 s), in ms, set with the keepalives and raised with them
 * (keepalive.ts). Keepalives alone never end a session whose server has a reply unacknowledged
 * (the partition took the client's ACK): Linux then retransmits for ~15 min and sends no probe.
 * Before the fix it was the server's default (0: the OS's ~15 min) on every connection.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { postgres } from '../../src/backends/postgres/index.js';
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

/** In ms, as set (SHOW would say '8s'), with the keepalive idle time it goes with. */
const SETTINGS = `select (select setting from pg_settings where name = 'tcp_user_timeout') as ut,
  current_setting('tcp_keepalives_idle') as idle`;

/** The server pid holding a namespaced key's lock. */
async function holderPid(fullKey: string): Promise<number> {
  const pids = await env.holders(fullKey);
  expect(pids).toHaveLength(1);
  return pids[0]!;
}

test('the session sets tcp_user_timeout to the keepalive idle time + 3 s, and raises it with the idle time', async () => {
  const pool = await env.pool({ max: 3 });
  const clients = handedOut(pool);
  const backend = postgres(pool);
  const prefix = `ut-${randomUUID().slice(0, 8)}`;
  const locks = createLocks(backend, { prefix });
  const settingsOf = async (pid: number) => (await clients.get(pid)!.query(SETTINGS)).rows[0];
  try {
    const short = await locks.acquire('short', { ttl: '3s' });
    const session = await holderPid(`${prefix}:short`);
    expect(await settingsOf(session)).toEqual({ ut: '8000', idle: '5' });
    // the grant raises both
    const lease = await locks.acquire('k', { ttl: '30s' });
    expect(await holderPid(`${prefix}:k`)).toBe(session);
    expect(await settingsOf(session)).toEqual({ ut: '33000', idle: '30' });
    // the liveness probe behind an extend with a longer TTL raises both
    await lease.extend('45500ms');
    expect(await settingsOf(session)).toEqual({ ut: '49000', idle: '46' });
    // never lowered while leases are on it
    await short.extend('4s');
    await lease.extend('10s');
    expect(await settingsOf(session)).toEqual({ ut: '49000', idle: '46' });
    // a TTL past Linux's largest idle time: clamped with it
    const long = await locks.acquire('long', { ttl: '10h' });
    expect(await settingsOf(session)).toEqual({ ut: '32770000', idle: '32767' });
    await Promise.all([short.release(), lease.release(), long.release()]);
  } finally {
    await locks.close();
  }
  // back in the pool with the pool's own value
  const all = await Promise.all([pool.connect(), pool.connect(), pool.connect()]);
  for (const c of all) expect((await c.query(SETTINGS)).rows[0].ut).toBe('0');
  for (const c of all) c.release();
});

test('a waiter connection: 8 s while it waits, the waiter’s TTL + 3 s once granted', async () => {
  const prefix = `ut-w-${randomUUID().slice(0, 8)}`;
  const pool = await env.pool({ max: 4 });
  const clients = handedOut(pool);
  // what a waiter connection has right after its setup, before its wait is sent
  const afterSetup = new Map<number, unknown>();
  const wrapped = new WeakSet<object>();
  pool.on('acquire', (c) => {
    if (wrapped.has(c)) return;
    wrapped.add(c);
    const client = c as unknown as { processID: number; query: (...a: unknown[]) => Promise<unknown> };
    const query = client.query.bind(client);
    client.query = (...a: unknown[]) => {
      if (typeof a[0] !== 'string' || !a[0].includes('client_connection_check_interval')) return query(...a);
      return query(...a).then(async (r) => {
        afterSetup.set(client.processID, ((await query(SETTINGS)) as pg.QueryResult).rows[0]);
        return r;
      });
    };
  });
  const backend = postgres(pool);
  const locks = createLocks(backend, { prefix });
  const other = createLocks(postgres(await env.pool({ max: 3 })), { prefix });
  try {
    const held = await other.acquire('k');
    const waiting = locks.acquire('k', { ttl: '40s', wait: '10s' });
    waiting.catch(() => {});
    const waiter = await env.waiter(`${prefix}:k`);
    expect(waiter).toBeDefined();
    expect(waiter).not.toBe(backend.sessionPid);
    expect(afterSetup.get(waiter!)).toEqual({ ut: '8000', idle: '5' });
    await held.release();
    const mine = await waiting;
    expect(await holderPid(`${prefix}:k`)).toBe(waiter);
    expect((await clients.get(waiter!)!.query(SETTINGS)).rows[0]).toEqual({ ut: '43000', idle: '40' });
    await mine.release();
  } finally {
    await locks.close();
    await other.close();
  }
});
