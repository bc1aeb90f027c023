/**
 * `advisoryKey` (exported from leasehold/postgres) checks its arguments as the backends do: a bad
 * key or schema throws InvalidArgumentError instead of a TypeError or a silently different lock.
 */
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { createLocks, InvalidArgumentError } from '../../src/index.js';
import { advisoryKey, lockParts, postgres } from '../../src/backends/postgres/index.js';
import { PG_URL } from './support.js';

describe('advisoryKey', () => {
  test('a bad key is refused with InvalidArgumentError', () => {
    for (const bad of [5, null, undefined, {}, 5n, '', 'a\u0000b', 'a\ud800', 'x'.repeat(1282)]) {
      expect(() => advisoryKey(bad as never), String(bad)).toThrow(InvalidArgumentError);
    }
    expect(() => advisoryKey(5 as never)).toThrow(/advisoryKey\(\): fullKey must be a string/);
  });

  test('a bad schema is refused with InvalidArgumentError, not hashed into another lock', () => {
    for (const bad of [5, null, {}, '', 'a b', 'x;', 'billing"', '1abc', 'a'.repeat(64)]) {
      expect(() => advisoryKey('leasehold:k', bad as never), String(bad)).toThrow(InvalidArgumentError);
    }
    expect(() => advisoryKey('leasehold:k', 'a b')).toThrow(/advisoryKey\(\): schema must be a plain SQL identifier/);
  });

  test('lockParts refuses what is not an advisory key (a signed int8) with InvalidArgumentError', () => {
    for (const bad of [5, '5', null, undefined, 2n ** 63n, 2n ** 70n, -(2n ** 63n) - 1n]) {
      expect(() => lockParts(bad as never), String(bad)).toThrow(InvalidArgumentError);
    }
    // 2^70 used to wrap around to 0:0, the parts of another lock
    expect(() => lockParts(2n ** 70n)).toThrow(/lockParts\(\): key must be a bigint/);
    expect(lockParts(-1n)).toEqual({ classid: '4294967295', objid: '4294967295' });
    expect(lockParts(-(2n ** 63n))).toEqual({ classid: '2147483648', objid: '0' });
    expect(lockParts(2n ** 63n - 1n)).toEqual({ classid: '2147483647', objid: '4294967295' });
  });

  test('valid arguments hash as before: the same bigint every time, schemas apart', () => {
    const k = advisoryKey('leasehold:order:42');
    expect(typeof k).toBe('bigint');
    expect(advisoryKey('leasehold:order:42')).toBe(k);
    expect(advisoryKey('leasehold:order:42', 'public')).toBe(k);
    expect(advisoryKey('leasehold:order:42', 'billing')).not.toBe(k);
    // the longest full key the library makes: a 256-byte prefix, ':', a 1,024-byte key
    expect(typeof advisoryKey(`${'p'.repeat(256)}:${'k'.repeat(1024)}`)).toBe('bigint');
    expect(lockParts(k).classid).toMatch(/^\d+$/);
  });
});

describe('postgres(): a NUL in the namespaced key', () => {
  test('is refused with a message that shows the full key, so a prefix with NUL is named', async () => {
    // before, a prefix holding NUL was reported as "key must not contain NUL" for a key without one
    const pool = new pg.Pool({ connectionString: PG_URL, max: 3 });
    try {
      const backend = postgres(pool);
      for (const [prefix, key] of [
        ['app\u0000', 'report'],
        ['app', 'rep\u0000ort'],
      ]) {
        const locks = createLocks(backend, { prefix });
        const e = await locks.acquire(key!).catch((x: unknown) => x);
        expect(e).toBeInstanceOf(InvalidArgumentError);
        expect((e as Error).message).toContain(JSON.stringify(`${prefix}:${key}`));
      }
    } finally {
      await pool.end();
    }
  });
});
