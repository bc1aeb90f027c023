/**
 * The TCP keepalive idle time of the connections that carry leases (keepalive.ts), read on those
 * very connections: never below the longest TTL of their leases (grant, waiter grant, extend
 * with a longer TTL), 5 s on a connection with none, clamped at Linux's 32767 s, with the
 * lease's local validity kept within what the server then guarantees. The partition itself:
 * partition.test.ts.
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

const IDLE = `select current_setting('tcp_keepalives_idle') as idle,
  current_setting('tcp_keepalives_interval') as interval, current_setting('tcp_keepalives_count') as count`;

/** The server pid holding a namespaced key's lock. */
async function holderPid(fullKey: string): Promise<number> {
  const pids = await env.holders(fullKey);
  expect(pids).toHaveLength(1);
  return pids[0]!;
}

test('a connection that carries leases keeps its session through silence of at least the longest TTL', async () => {
  const pool = await env.pool({ max: 3 });
  const clients = handedOut(pool);
  const backend = postgres(pool);
  const prefix = `ka-${randomUUID().slice(0, 8)}`;
  const locks = createLocks(backend, { prefix });
  const idleOf = async (pid: number) => (await clients.get(pid)!.query(IDLE)).rows[0];
  try {
    const short = await locks.acquire('short', { ttl: '3s' });
    const session = await holderPid(`${prefix}:short`);
    // no lease longer than 5 s on it: today's 5 s (a vanished host loses its session in ~8 s)
    expect(await idleOf(session)).toEqual({ idle: '5', interval: '1', count: '3' });
    const lease = await locks.acquire('k', { ttl: '30s' });
    expect(await holderPid(`${prefix}:k`)).toBe(session);
    expect(await idleOf(session)).toEqual({ idle: '30', interval: '1', count: '3' });
    // a longer TTL given to extend (rounded up to whole seconds)
    await lease.extend('45500ms');
    expect(await idleOf(session)).toEqual({ idle: '46', interval: '1', count: '3' });
    // a shorter one later: never lowered while leases are on it
    await short.extend('4s');
    await lease.extend('10s');
    expect((await idleOf(session)).idle).toBe('46');
    await Promise.all([short.release(), lease.release()]);
  } finally {
    await locks.close();
  }
});

test('a lock granted on a waiter connection raises that connection’s idle time to the waiter’s TTL', async () => {
  const prefix = `ka-w-${randomUUID().slice(0, 8)}`;
  const pool = await env.pool({ max: 4 });
  const clients = handedOut(pool);
  const backend = postgres(pool);
  const locks = createLocks(backend, { prefix });
  const other = createLocks(postgres(await env.pool({ max: 3 })), { prefix });
  try {
    const held = await other.acquire('k');
    const waiting = locks.acquire('k', { ttl: '40s', wait: '10s' });
    waiting.catch(() => {});
    const waiter = await env.waiter(`${prefix}:k`);
    expect(waiter).toBeDefined();
    await held.release();
    const mine = await waiting;
    expect(await holderPid(`${prefix}:k`)).toBe(waiter);
    expect(waiter).not.toBe(backend.sessionPid);
    expect((await clients.get(waiter!)!.query(IDLE)).rows[0].idle).toBe('40');
    await mine.release();
  } finally {
    await locks.close();
    await other.close();
  }
});

interface HeldPeek {
  until: number;
  ttlMs: number;
  timer: { _idleTimeout: number } | null;
}
interface LeasesPeek {
  held: Map<string, HeldPeek>;
  expireAt(h: HeldPeek, until: number, seenAt: number, ttlMs: number): void;
}

test('a TTL above Linux’s 32767 s: the idle time is clamped, and the local validity never outlasts it (re-checked halfway)', async () => {
  const pool = await env.pool({ max: 3 });
  const clients = handedOut(pool);
  const backend = postgres(pool);
  const prefix = `ka-big-${randomUUID().slice(0, 8)}`;
  const locks = createLocks(backend, { prefix });
  try {
    const t0 = performance.now();
    const lease = await locks.acquire('k', { ttl: '10h' });
    const session = await holderPid(`${prefix}:k`);
    expect((await clients.get(session)!.query(IDLE)).rows[0].idle).toBe('32767');
    const leases = (backend as unknown as { leases: LeasesPeek }).leases;
    const h = leases.held.get(`${prefix}:k`)!;
    expect(h.until).toBeGreaterThanOrEqual(t0 + 36_000_000);
    // the server keeps a silent session 32767 s + 3 probes: the backend looks again halfway there
    // (its timer), not at the TTL
    expect(h.timer!._idleTimeout).toBeLessThanOrEqual((32_767_000 + 3_000) / 2);
    // that look, brought forward (as if the grant had been sent ~4.5 h ago): one probe, the lease
    // still held, its validity unchanged, the next look again within the bound
    const until = h.until;
    const queries: string[] = [];
    const spied = clients.get(session)! as unknown as { query: (...a: unknown[]) => unknown };
    const orig = spied.query.bind(spied);
    spied.query = (...a: unknown[]) => (queries.push(JSON.stringify(a[0]).slice(0, 80)), orig(...a));
    leases.expireAt(h, until, performance.now() - (32_767_000 + 2_000) / 2 + 50, h.ttlMs);
    for (let i = 0; i < 200 && queries.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    spied.query = orig;
    await new Promise((r) => setTimeout(r, 200)); // its answer
    expect(queries).toHaveLength(1);
    expect(lease.held).toBe(true);
    expect(leases.held.get(`${prefix}:k`)).toBe(h);
    expect(h.until).toBe(until);
    expect(h.timer!._idleTimeout).toBeGreaterThan(16_000_000);
    expect(h.timer!._idleTimeout).toBeLessThanOrEqual((32_767_000 + 3_000) / 2);
    await lease.release();
  } finally {
    await locks.close();
  }
});
