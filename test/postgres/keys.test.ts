/**
 * `advisoryKey` (exported from leasehold/postgres) checks its arguments as the backends do: a bad
 * key or schema throws InvalidArgumentError instead of a TypeError or a silently different lock.
 */
import { describe, expect, test } from 'vitest';
import { InvalidArgumentError } from '../../src/index.js';
import { advisoryKey, lockParts } from '../../src/backends/postgres/index.js';

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
