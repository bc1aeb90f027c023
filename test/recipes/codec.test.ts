/** How idempotent stores a result: JSON plus what JSON would change or refuse (src/recipes/codec.ts). */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { decode, encode } from '../../src/recipes/codec.js';

describe('the result codec', () => {
  test('round-trips any value built of JSON, bigint, Date, Map, Set, undefined, NaN, ±Infinity, -0', () => {
    fc.assert(
      fc.property(
        fc.anything({ withBigInt: true, withDate: true, withMap: true, withSet: true, withNullPrototype: false }),
        (v) => {
          expect(decode(encode(v))).toStrictEqual(v);
        },
      ),
      { numRuns: 500 },
    );
  });

  test('the values of issue #9: a BigInt charge and a Date come back as they went in', () => {
    const charge = { id: 12345678901234567890n, at: new Date('2026-11-30T10:00:00.000Z'), note: undefined };
    const back = decode(encode(charge)) as typeof charge;
    expect(back.id).toBe(12345678901234567890n);
    expect(back.at).toBeInstanceOf(Date);
    expect(back.at.toISOString()).toBe('2026-11-30T10:00:00.000Z');
    expect(back).toStrictEqual(charge);
    expect(decode(encode(Buffer.from('bytes')))).toEqual(Buffer.from('bytes'));
    expect(decode(encode(new Date(NaN))) as Date).toSatisfy((d: Date) => Number.isNaN(d.getTime()));
  });

  test('plain JSON is stored as plain JSON; an object that uses the tag name survives', () => {
    expect(encode({ a: [1, 'x', null, true] })).toBe('{"a":[1,"x",null,true]}');
    const tricky = { $lh: 'bigint', v: '1', inner: { $lh: 'date' } };
    expect(decode(encode(tricky))).toStrictEqual(tricky);
    const proto = JSON.parse('{"__proto__": {"polluted": 1}}') as object;
    const back = decode(encode(proto)) as Record<string, unknown>;
    expect(Object.getPrototypeOf(back)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  test('a function, a symbol or a cycle is refused, never silently dropped', () => {
    expect(() => encode(() => 1)).toThrow(TypeError);
    expect(() => encode({ pay: () => 1 })).toThrow(/function cannot be stored \(at "pay"\)/);
    expect(() => encode([Symbol('s')])).toThrow(TypeError);
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    expect(() => encode(cycle)).toThrow(TypeError);
  });
});
