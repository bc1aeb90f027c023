import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createLocks, InvalidArgumentError, MAX_DURATION_MS, MIN_RENEWABLE_TTL_MS, toMs } from '../../src/index.js';
import type { WarningEvent } from '../../src/index.js';
import { memory } from '../../src/backends/memory/index.js';

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
    [0.4, 1],
    // the forms of the `ms` package: case-insensitive, long unit names, a space before the unit
    ['30S', 30_000],
    ['2 minutes', 120_000],
    ['1 min', 60_000],
    ['3 secs', 3000],
    ['100 msecs', 100],
    ['1 Hour', 3_600_000],
    ['2 hrs', 7_200_000],
    ['.5s', 500],
    ['1d', 86_400_000],
    ['1 day', 86_400_000],
    ['1w', 604_800_000],
    // compounds (Go, systemd, Grafana write them so)
    ['1m30s', 90_000],
    ['1h 30m', 5_400_000],
    ['1 hour 30 minutes', 5_400_000],
    ['2s500ms', 2500],
    ['1.5ms', 2],
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
    // a string without a unit is ambiguous: seconds or milliseconds?
    '42',
    '10',
    '10.5',
    ' 7 ',
    '-5 minutes',
    '1m30',
    's',
    '1e3s',
    '1y', // the `ms` package knows years, but a year is longer than any timer
    '4w',
    'x'.repeat(200),
    null,
    {},
    [1],
    2 ** 40,
  ])('%j is rejected', (input) => {
    expect(() => toMs(input, 'ttl')).toThrow(InvalidArgumentError);
  });

  test('a negative string is told as one, never as a missing unit; "--" is not a duration', () => {
    expect(() => toMs('-1', 'ttl')).toThrow(/^ttl must be > 0, got "-1"$/);
    expect(() => toMs('-1s', 'wait', { allowZero: true })).toThrow(/^wait must be ≥ 0, got "-1s"$/);
    expect(() => toMs('- 2.5 minutes', 'ttl')).toThrow(/^ttl must be > 0, got "- 2.5 minutes"$/);
    expect(() => toMs('--', 'ttl')).toThrow(/^ttl: "--" is not a duration \(/);
  });

  test('zero is allowed only where asked (waits)', () => {
    expect(toMs(0, 'wait', { allowZero: true })).toBe(0);
    expect(toMs('0s', 'wait', { allowZero: true })).toBe(0);
    expect(() => toMs(-1, 'wait', { allowZero: true })).toThrow(InvalidArgumentError);
  });

  test('the message names the option and the value', () => {
    expect(() => toMs('soon', 'lockAtMostFor')).toThrow(/lockAtMostFor.*soon/);
  });

  test('a bare numeric string is refused with the fix in the message', () => {
    expect(() => toMs('10', 'ttl')).toThrow(/ttl: "10" has no unit; pass a number \(10\).*'10ms'/);
  });

  test('property: every unit name of the `ms` package, any case, with or without a space', () => {
    const units: [string, number][] = [
      ['ms', 1],
      ['msec', 1],
      ['msecs', 1],
      ['millisecond', 1],
      ['milliseconds', 1],
      ['s', 1000],
      ['sec', 1000],
      ['secs', 1000],
      ['second', 1000],
      ['seconds', 1000],
      ['m', 60_000],
      ['min', 60_000],
      ['mins', 60_000],
      ['minute', 60_000],
      ['minutes', 60_000],
      ['h', 3_600_000],
      ['hr', 3_600_000],
      ['hrs', 3_600_000],
      ['hour', 3_600_000],
      ['hours', 3_600_000],
      ['d', 86_400_000],
      ['day', 86_400_000],
      ['days', 86_400_000],
    ];
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 24 }),
        fc.constantFrom(...units),
        fc.boolean(),
        fc.boolean(),
        (n, [unit, factor], space, upper) => {
          const text = `${n}${space ? ' ' : ''}${upper ? unit.toUpperCase() : unit}`;
          expect(toMs(text, 'x')).toBe(n * factor);
        },
      ),
    );
  });

  test('property: a compound is the sum of its parts', () => {
    fc.assert(
      fc.property(fc.nat(400), fc.nat(59), fc.nat(59), fc.nat(999), (h, m, s, ms) => {
        fc.pre(h + m + s + ms > 0);
        expect(toMs(`${h}h${m}m${s}s${ms}ms`, 'x')).toBe(((h * 60 + m) * 60 + s) * 1000 + ms);
        expect(toMs(`${h}h ${m}m ${s}s ${ms}ms`, 'x')).toBe(((h * 60 + m) * 60 + s) * 1000 + ms);
      }),
    );
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

describe('a TTL too small to be renewed reliably', () => {
  function collect() {
    const seen: WarningEvent[] = [];
    const fn = (m: unknown) => seen.push(m as WarningEvent);
    subscribe('leasehold:warning', fn);
    return { seen, stop: () => unsubscribe('leasehold:warning', fn) };
  }

  test('is accepted and announced on leasehold:warning, once per value per Locks', async () => {
    const w = collect();
    const locks = createLocks(memory(), { ttl: 300 });
    try {
      expect(w.seen).toEqual([expect.objectContaining({ code: 'LEASEHOLD_SMALL_TTL', ttlMs: 300 })]);
      expect(w.seen[0]!.message).toMatch(/ttl 300ms is too short to be renewed reliably: renewal runs every 100ms/);
      const a = await locks.acquire('small-a', { ttl: 90 });
      const b = await locks.acquire('small-b', { ttl: 90 });
      expect(w.seen.map((e) => [e.ttlMs, e.key])).toEqual([
        [300, undefined],
        [90, 'small-a'],
      ]);
      await Promise.all([a.release(), b.release()]);
    } finally {
      w.stop();
      await locks.close();
    }
  });

  test('is not announced for a lease that is not renewed, nor for a TTL of at least 1s', async () => {
    const w = collect();
    const quiet = createLocks(memory(), { ttl: 50, renew: false });
    const fine = createLocks(memory(), { ttl: MIN_RENEWABLE_TTL_MS });
    try {
      const lease = await fine.acquire('big', { ttl: '2s' });
      await lease.release();
      await (await quiet.acquire('unrenewed')).release();
      expect(w.seen).toEqual([]);
      // a per-call renew: true turns the small default back into a renewed one
      await (await quiet.acquire('renewed', { renew: true })).release();
      expect(w.seen).toEqual([expect.objectContaining({ ttlMs: 50, key: 'renewed' })]);
    } finally {
      w.stop();
      await Promise.all([quiet.close(), fine.close()]);
    }
  });
});

test('remaining() is whole milliseconds', async () => {
  const locks = createLocks(memory(), { ttl: '10s' });
  const lease = await locks.acquire('whole');
  for (let i = 0; i < 20; i++) {
    const left = lease.remaining();
    expect(Number.isInteger(left)).toBe(true);
    expect(left).toBeGreaterThan(9000);
    expect(left).toBeLessThanOrEqual(10_000);
  }
  await lease.release();
  expect(lease.remaining()).toBe(0);
  await locks.close();
});
