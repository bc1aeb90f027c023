import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { InvalidArgumentError, MAX_DURATION_MS, toMs } from '../../src/index.js';

describe('durations', () => {
  test.each([
    [250, 250],
    ['250ms', 250],
    ['30s', 30_000],
    ['1.5s', 1500],
    ['5m', 300_000],
    ['1h', 3_600_000],
    ['2d', 172_800_000],
    [' 10 s ', 10_000],
    ['42', 42],
    [0.4, 1],
  ])('%j is %d ms', (input, ms) => {
    expect(toMs(input, 'ttl')).toBe(ms);
  });

  test.each([
    0,
    -1,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    '',
    'soon',
    '-5s',
    '1 fortnight',
    '5 minutes',
    null,
    {},
    [1],
    2 ** 40,
  ])('%j is rejected', (input) => {
    expect(() => toMs(input, 'ttl')).toThrow(InvalidArgumentError);
  });

  test('zero is allowed only where asked (waits)', () => {
    expect(toMs(0, 'wait', { allowZero: true })).toBe(0);
    expect(toMs('0s', 'wait', { allowZero: true })).toBe(0);
    expect(() => toMs(-1, 'wait', { allowZero: true })).toThrow(InvalidArgumentError);
  });

  test('the message names the option and the value', () => {
    expect(() => toMs('soon', 'lockAtMostFor')).toThrow(/lockAtMostFor.*soon/);
  });

  test('property: whole seconds and milliseconds agree', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: Math.floor(MAX_DURATION_MS / 1000) }), (s) => {
        expect(toMs(`${s}s`, 'x')).toBe(s * 1000);
        expect(toMs(`${s * 1000}ms`, 'x')).toBe(s * 1000);
      }),
    );
  });

  test('property: every accepted value is a whole number of ms within bounds', () => {
    fc.assert(
      fc.property(fc.oneof(fc.double(), fc.string()), (v) => {
        try {
          const ms = toMs(v, 'x');
          expect(Number.isInteger(ms)).toBe(true);
          expect(ms).toBeGreaterThanOrEqual(1);
          expect(ms).toBeLessThanOrEqual(MAX_DURATION_MS);
        } catch (e) {
          expect(e).toBeInstanceOf(InvalidArgumentError);
        }
      }),
    );
  });
});
