/**
 * An options object must be a plain object: a Map, a Date or a class instance has no own
 * enumerable option names, so it was read as `{}` and its settings were silently ignored.
 */
import { describe, expect, test } from 'vitest';
import { memory } from '../../src/backends/memory/index.js';
import { createLocks, InvalidArgumentError, withOptimisticRetry } from '../../src/index.js';

class Opts {
  ttl = 5;
}

describe('options that are not a plain object', () => {
  const notPlain: Array<[string, unknown]> = [
    ['Map', new Map([['ttl', 5]])],
    ['Date', new Date()],
    ['Opts', new Opts()],
    ['Set', new Set(['ttl'])],
  ];

  test('are refused before any I/O, by every call that takes options', async () => {
    const locks = createLocks(memory());
    try {
      for (const [name, o] of notPlain) {
        const said = new RegExp(`options must be a plain object \\(\\{ … \\}\\), got a ${name}$`);
        expect(() => createLocks(memory(), o as never)).toThrow(said);
        await expect(locks.acquire('k', o as never)).rejects.toThrow(said);
        await expect(locks.tryAcquire('k', o as never)).rejects.toThrow(said);
        await expect(locks.withLock('k', () => 1, o as never)).rejects.toThrow(said);
        await expect(locks.runExclusive('k', () => 1, o as never)).rejects.toThrow(said);
        await expect(locks.idempotent('k', () => 1, o as never)).rejects.toBeInstanceOf(InvalidArgumentError);
        expect(() => locks.elect('e', o as never)).toThrow(InvalidArgumentError);
        await expect(withOptimisticRetry(() => 1, o as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      }
      // nothing was taken on the way
      expect(await locks.inspect('k')).toBeNull();
    } finally {
      await locks.close();
    }
  });

  test('plain objects are accepted, with or without a prototype', async () => {
    const locks = createLocks(memory(), Object.assign(Object.create(null) as object, { ttl: '5s' }));
    try {
      const bare = Object.assign(Object.create(null) as object, { ttl: 2000 });
      const lease = await locks.acquire('k', bare);
      expect(lease.remaining()).toBeLessThanOrEqual(2000);
      await lease.release();
      expect((await locks.runExclusive('k', () => 'ran', {})).ran).toBe(true);
    } finally {
      await locks.close();
    }
  });
});
