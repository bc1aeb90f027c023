/**
 * One shape for every library under test: `acquire(key)` waits until the lock is held and
 * returns a handle whose `release()` gives it back. Each constructor configures the library the
 * way its users would (defaults unless stated); docs/benchmarks.md lists every setting.
 */
import { randomBytes } from 'node:crypto';
import { Redlock } from '@sesamecare-oss/redlock';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { Mutex, RedlockMutex } from 'redis-semaphore';
import { createLocks, type Backend, type Locks } from '../../src/index.js';
import { advisoryKeyOf } from './pgkey.js';

export interface Held {
  release(): Promise<unknown>;
}

export interface Subject {
  readonly name: string;
  acquire(key: string): Promise<Held>;
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
export async function floorSubject(client: Redis, ttlMs: number): Promise<Subject> {
  client.defineCommand('benchCompareAndDelete', {
    numberOfKeys: 1,
    lua: "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
  });
  const cad = (client as unknown as { benchCompareAndDelete(k: string, t: string): Promise<number> })
    .benchCompareAndDelete;
  return {
    name: 'raw ioredis (floor)',
    async acquire(key) {
      const token = randomBytes(16).toString('base64url');
      if ((await client.set(key, token, 'PX', ttlMs, 'NX')) !== 'OK') throw new Error(`floor: ${key} is held`);
      return { release: () => cad.call(client, key, token) };
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

/** `waits`: retry for up to `t.waitMs` (contended); otherwise the default 10 retries. */
export function sesamecareSubject(name: string, clients: Redis[], t: LockTimes, waits = true): Subject {
  const redlock = new Redlock(clients as any, sesamecareSettings(waits ? t.waitMs : null));
  redlock.on('error', () => {}); // per-node failures are reported here; the bench counts outcomes
  return {
    name,
    async acquire(key) {
      const lock = await redlock.acquire([key], t.ttlMs);
      return { release: () => lock.release() };
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
