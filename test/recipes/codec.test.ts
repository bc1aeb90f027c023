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

  test('an ArrayBuffer, typed arrays and a DataView come back as themselves, bytes and all', () => {
    // before, an ArrayBuffer and a DataView came back as {} and an Int16Array as {"0":7,"1":8}
    const body = new Uint8Array([1, 2, 3]).buffer;
    const value = {
      body,
      samples: new Int16Array([7, -8]),
      floats: new Float64Array([0.5, -0, NaN]),
      big: new BigInt64Array([-1n, 2n ** 62n]),
      view: new DataView(new Uint8Array([9, 8, 7, 6]).buffer, 1, 2),
      slice: new Uint16Array(new Uint16Array([1, 2, 3, 4]).buffer, 2, 2), // an offset into a larger buffer
    };
    const back = decode(encode(value)) as typeof value;
    expect(back.body).toBeInstanceOf(ArrayBuffer);
    expect([...new Uint8Array(back.body)]).toEqual([1, 2, 3]);
    expect(back.samples).toStrictEqual(new Int16Array([7, -8]));
    expect(back.floats).toStrictEqual(new Float64Array([0.5, -0, NaN]));
    expect(back.big).toStrictEqual(new BigInt64Array([-1n, 2n ** 62n]));
    expect(back.view).toBeInstanceOf(DataView);
    expect([back.view.getUint8(0), back.view.getUint8(1), back.view.byteLength]).toEqual([8, 7, 2]);
    expect([...back.slice]).toEqual([2, 3]);
  });

  test('a symbol-keyed property, a WeakMap, a WeakSet or a Promise is refused, never silently dropped', () => {
    expect(() => encode({ [Symbol.for('meta')]: 'x', a: 1 })).toThrow(/symbol-keyed property cannot be stored/);
    expect(() => encode({ m: new WeakMap() })).toThrow(/WeakMap cannot be stored \(at "m"\)/);
    expect(() => encode([new WeakSet()])).toThrow(TypeError);
    expect(() => encode({ p: Promise.resolve(1) })).toThrow(/Promise cannot be stored/);
    // a non-enumerable symbol is not part of the value (as with JSON)
    const hidden = Object.defineProperty({ a: 1 }, Symbol('x'), { value: 1, enumerable: false });
    expect(decode(encode(hidden))).toStrictEqual({ a: 1 });
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
