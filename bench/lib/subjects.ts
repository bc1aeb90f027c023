/**
 * One shape for every library under test: `acquire(key)` waits until the lock is held and
 * returns a handle whose `release()` gives it back. Each constructor configures the library the
 * way its users would (defaults unless stated); docs/benchmarks.md lists every setting.
 */
import { randomBytes } from 'node:crypto';
import { Redlock } from '@sesamecare-oss/redlock';
import Database from 'better-sqlite3';
import type { Etcd3 } from 'etcd3';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type postgresJs from 'postgres';
import { Mutex, RedlockMutex } from 'redis-semaphore';
import type { Backend, Locks } from '../../src/index.js';
import { createLocks } from './leasehold.js';
import { advisoryKeyOf } from './pgkey.js';
import { now, within } from './stats.js';

export interface Held {
  release(): Promise<unknown>;
}

export interface Subject {
  readonly name: string;
  /**
   * `budgetMs`: the most this acquire may wait (the contended worker's time left to its deadline);
   * only a subject whose wait would otherwise outlast the run honours it (below).
   */
  acquire(key: string, budgetMs?: number): Promise<Held>;
  close(): Promise<void>;
}

export interface LockTimes {
  /** Lease / lock TTL in ms. */
  ttlMs: number;
  /** How long one acquire may wait, in ms. */
  waitMs: number;
}

/**
 * The floor: raw `SET NX PX` + compare-and-delete by EVALSHA (ioredis `defineCommand`, which
 * falls back to EVAL on NOSCRIPT, as users run it): two round trips, nothing else.
 */
export async function floorSubject(client: Redis, ttlMs: number, name = 'raw ioredis (floor)'): Promise<Subject> {
  client.defineCommand('benchCompareAndDelete', {
    numberOfKeys: 1,
    lua: "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
  });
  const cad = (client as unknown as { benchCompareAndDelete(k: string, t: string): Promise<number> })
    .benchCompareAndDelete;
  return {
    name,
    async acquire(key) {
      const token = randomBytes(16).toString('base64url');
      if ((await client.set(key, token, 'PX', ttlMs, 'NX')) !== 'OK') throw new Error(`floor: ${key} is held`);
      return { release: () => cad.call(client, key, token) };
    },
    close: async () => {},
  };
}

/**
 * Diagnostic floor for a fair hand-off (section 2): the lock is a token passed round-robin
 * between the workers, each blocked in `BLPOP` on a list of its own; a release is one `RPUSH` to
 * the next worker's list. Every grant goes to another process (100 % holder switches), with one
 * command per grant plus the blocked pop: what a fair hand-off costs at the least on this machine.
 * Not a lock (no TTL, no fence, no queue of arrivals); worker 0 holds the first turn.
 */
export function fairFloorSubject(
  client: Redis,
  blocking: Redis,
  index: number,
  workers: number,
  waitMs: number,
): Subject {
  const turn = (key: string, i: number) => `${key}:turn:${i % workers}`;
  return {
    name: 'raw fair hand-off (diagnostic floor)',
    async acquire(key) {
      const until = performance.now() + waitMs;
      while ((await blocking.blpop(turn(key, index), 1)) === null) {
        if (performance.now() > until) throw new Error(`fair floor: no turn for worker ${index} within ${waitMs} ms`);
      }
      return { release: () => client.rpush(turn(key, index + 1), '1') };
    },
    close: async () => {},
  };
}

/**
 * Diagnostic: the same floor on node-redis (`SET NX PX` + `EVALSHA` compare-and-delete through
 * `sendCommand`), to tell node-redis's own cost from leasehold's on that client.
 */
export async function nodeRedisFloorSubject(
  client: {
    sendCommand(args: string[]): Promise<unknown>;
  },
  ttlMs: number,
): Promise<Subject> {
  const lua = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
  const sha = String(await client.sendCommand(['SCRIPT', 'LOAD', lua]));
  return {
    name: 'raw node-redis (diagnostic floor)',
    async acquire(key) {
      const token = randomBytes(16).toString('base64url');
      if ((await client.sendCommand(['SET', key, token, 'PX', String(ttlMs), 'NX'])) !== 'OK')
        throw new Error(`node-redis floor: ${key} is held`);
      return { release: () => client.sendCommand(['EVALSHA', sha, '1', key, token]) };
    },
    close: async () => {},
  };
}

/** leasehold over any backend: `acquire(key, { wait })` and `lease.release()`. */
export function leaseholdSubject(name: string, backend: unknown, t: LockTimes): Subject & { locks: Locks } {
  const locks = createLocks(backend as Parameters<typeof createLocks>[0], { ttl: t.ttlMs, wait: t.waitMs });
  return {
    name,
    locks,
    acquire: (key) => locks.acquire(key),
    close: () => locks.close(),
  };
}

/**
 * Settings of @sesamecare-oss/redlock as its users run it: the defaults (retryDelay 200ms,
 * retryJitter ±100ms, driftFactor 0.01), except that a waiting caller retries for as long as the
 * others wait (`retryCount` = wait / retryDelay) instead of giving up after the default 10 tries.
 */
export function sesamecareSettings(waitMs: number | null) {
  return { retryDelay: 200, retryJitter: 100, retryCount: waitMs === null ? 10 : Math.ceil(waitMs / 200) };
}

/**
 * Did sesamecare's acquire fail only because the key stayed locked (every vote against it in its
 * last attempt a ResourceLockedError)? Its attempts' stats settle when all votes are in: waited
 * for at most `boundMs`; not settled, or not an ExecutionError, is a no.
 */
async function onlyLocked(e: unknown, boundMs = 1000): Promise<boolean> {
  const attempts = (e as { attempts?: Promise<{ votesAgainst: Map<unknown, Error> }>[] } | null)?.attempts;
  const last = attempts?.[attempts.length - 1];
  if (!last) return false;
  try {
    const stats = await within(Promise.resolve(last), boundMs, 'sesamecare attempt stats');
    const against = [...stats.votesAgainst.values()];
    return against.length > 0 && against.every((v) => v?.name === 'ResourceLockedError');
  } catch {
    return false;
  }
}

/** An acquire gave up because the caller's time budget ran out (the run is incomplete, not failed). */
export class BudgetSpent extends Error {
  constructor(cause: unknown) {
    super('retries stopped at the time budget', { cause });
  }
}

/** `waits`: retry for up to `t.waitMs` (contended); otherwise the default 10 retries. */
export function sesamecareSubject(name: string, clients: Redis[], t: LockTimes, waits = true): Subject {
  const redlock = new Redlock(clients as any, sesamecareSettings(waits ? t.waitMs : null));
  redlock.on('error', () => {}); // per-node failures are reported here; the bench counts outcomes
  return {
    name,
    async acquire(key, budgetMs) {
      // a poller on 5 nodes can wait tens of seconds: within a contended run it retries only
      // until the worker's deadline, so the run ends and reports (it used to outlast the harness's
      // wait for its result, and the row was lost)
      if (!waits || budgetMs === undefined) {
        const lock = await redlock.acquire([key], t.ttlMs);
        return { release: () => lock.release() };
      }
      const started = now();
      try {
        const lock = await redlock.acquire([key], t.ttlMs, { retryCount: Math.max(0, Math.floor(budgetMs / 200)) });
        return { release: () => lock.release() };
      } catch (e) {
        // its jittered retries (200 ± 100 ms each) ran out close to the deadline with the key
        // still locked: the run is incomplete, and this is not the library's failure. Anything
        // else (a closed connection, a script error, an early end) is an error of its own.
        if (now() - started >= budgetMs * 0.9 - 300 && (await onlyLocked(e))) throw new BudgetSpent(e);
        throw e;
      }
    },
    close: async () => {}, // redlock.quit() would close the clients, which the bench owns
  };
}

/** redis-semaphore options: defaults (retryInterval 10ms, refresh at 0.8 × lockTimeout). */
export function semaphoreOptions(t: LockTimes) {
  return { lockTimeout: t.ttlMs, acquireTimeout: t.waitMs, retryInterval: 10, onLockLost: () => {} };
}

export function semaphoreMutexSubject(name: string, client: Redis, t: LockTimes): Subject {
  return {
    name,
    async acquire(key) {
      const m = new Mutex(client, key, semaphoreOptions(t));
      await m.acquire();
      return { release: () => m.release() };
    },
    close: async () => {},
  };
}

export function semaphoreRedlockSubject(name: string, clients: Redis[], t: LockTimes): Subject {
  return {
    name,
    async acquire(key) {
      const m = new RedlockMutex(clients, key, semaphoreOptions(t));
      await m.acquire();
      return { release: () => m.release() };
    },
    close: async () => {},
  };
}

/**
 * Raw advisory lock on one connection: `pg_try_advisory_lock` (uncontended) or the blocking
 * `pg_advisory_lock` (contended) then `pg_advisory_unlock`. One round trip each.
 */
export function pgRawSubject(client: pg.Client, mode: 'try' | 'block'): Subject {
  const lockSql = mode === 'try' ? 'SELECT pg_try_advisory_lock($1) AS ok' : 'SELECT pg_advisory_lock($1) AS ok';
  return {
    name: mode === 'try' ? 'raw pg_try_advisory_lock (floor)' : 'raw pg_advisory_lock (floor)',
    async acquire(key) {
      const k = advisoryKeyOf(key);
      const r = await client.query({ text: lockSql, values: [k] });
      if (mode === 'try' && r.rows[0]?.ok !== true) throw new Error(`pg floor: ${key} is held`);
      return { release: () => client.query({ text: 'SELECT pg_advisory_unlock($1)', values: [k] }) };
    },
    close: async () => {},
  };
}

/** The floor on postgres.js: pg_try_advisory_lock / pg_advisory_unlock on one reserved connection. */
export function pgjsRawSubject(sql: postgresJs.ReservedSql): Subject {
  return {
    name: 'raw pg_try_advisory_lock on postgres.js',
    async acquire(key) {
      const k = advisoryKeyOf(key);
      const r = await sql`SELECT pg_try_advisory_lock(${k}::int8) AS ok`;
      if (r[0]?.ok !== true) throw new Error(`postgres.js floor: ${key} is held`);
      return { release: () => sql`SELECT pg_advisory_unlock(${k}::int8)` };
    },
    close: async () => sql.release(),
  };
}

/**
 * Diagnostic: leasehold's driver alone — the backend's acquire and release scripts with a fresh
 * token, none of the engine (validation, deadlines, signals, renewal, events). The gap between
 * this row and the full leasehold row is the engine's cost; between this row and the floor, the
 * scripts' cost.
 */
export function driverSubject(name: string, backend: Backend, ttlMs: number): Subject {
  return {
    name,
    async acquire(key) {
      const full = `leasehold:${key}`;
      const token = randomBytes(18).toString('base64url');
      if (!(await backend.acquire(full, { token, ttlMs, queue: true }))) throw new Error(`driver: ${key} is held`);
      return { release: () => backend.release(full, token) };
    },
    close: () => backend.close(),
  };
}

/**
 * The etcd floor: one put and one delete of the key on the same client (two round trips, each
 * write one raft commit and fsync). No lease, no queue, no ownership check: the least any lock
 * on etcd writes.
 */
export function etcdRawSubject(client: Etcd3): Subject {
  return {
    name: 'raw etcd put + delete (floor)',
    async acquire(key) {
      const k = Buffer.from(`bench-raw/${key}`);
      await client.kv.put({ key: k, value: randomBytes(16) });
      return { release: () => client.kv.deleteRange({ key: k }) };
    },
    close: async () => {},
  };
}

/** Creates the raw subject's file in WAL mode, so that the processes that open it never switch modes at once. */
export function prepareSqliteFile(path: string): void {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.close();
}

/**
 * What a user gets from SQLite alone: the lock is a write transaction (`BEGIN IMMEDIATE`), held
 * for the critical section; a waiter sits in SQLite's own busy handler (busy_timeout 5 s, which
 * sleeps and retries inside the call, blocking the process). No fence, no fairness.
 */
export function sqliteRawSubject(path: string): Subject {
  const db = new Database(path, { timeout: 5000 });
  if (db.pragma('journal_mode', { simple: true }) !== 'wal') db.pragma('journal_mode = WAL');
  const begin = db.prepare('BEGIN IMMEDIATE');
  const commit = db.prepare('COMMIT');
  return {
    name: 'raw SQLite BEGIN IMMEDIATE (busy_timeout)',
    async acquire() {
      begin.run();
      return { release: async () => commit.run() };
    },
    close: async () => void db.close(),
  };
}
