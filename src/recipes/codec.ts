/**
 * How `idempotent` stores a result: JSON, plus tags for what JSON would silently change or
 * refuse — `bigint`, `Date`, `Map`, `Set`, `Uint8Array`/`Buffer` (comes back as a Buffer), an
 * `ArrayBuffer`, the other typed arrays and `DataView` (each as its own type), `undefined`, `NaN`,
 * `±Infinity` and `-0`. A function or a symbol anywhere in the value (a symbol-keyed property too),
 * a `WeakMap`, `WeakSet` or `Promise`, a cycle, or a value whose `toJSON` gives nothing, is refused (a TypeError) instead of being dropped. Class instances come back as plain objects
 * of their own enumerable properties, as with JSON. Plain JSON values are stored as plain JSON.
 */

const TAG = '$lh';

/** Typed arrays and DataView, by constructor name (Uint8Array is stored as bytes: a Buffer). */
const VIEWS = new Map<string, new (buffer: ArrayBuffer) => ArrayBufferView>([
  ['Int8Array', Int8Array],
  ['Uint8ClampedArray', Uint8ClampedArray],
  ['Int16Array', Int16Array],
  ['Uint16Array', Uint16Array],
  ['Int32Array', Int32Array],
  ['Uint32Array', Uint32Array],
  ['Float32Array', Float32Array],
  ['Float64Array', Float64Array],
  ['BigInt64Array', BigInt64Array],
  ['BigUint64Array', BigUint64Array],
  ['DataView', DataView],
]);

const isEnumerable = (o: object, key: symbol) => Object.prototype.propertyIsEnumerable.call(o, key);

/** A copy of the bytes in a fresh ArrayBuffer of their own. */
function arrayBufferOf(base64: string): ArrayBuffer {
  const b = Buffer.from(base64, 'base64');
  const out = new ArrayBuffer(b.byteLength);
  new Uint8Array(out).set(b);
  return out;
}
type Tagged = { [TAG]: string; v?: unknown };

function replacer(this: Record<string, unknown>, k: string, v: unknown): unknown {
  const raw = this[k]; // before toJSON (a Date is already a string in `v`)
  switch (typeof raw) {
    case 'bigint':
      return { [TAG]: 'bigint', v: raw.toString() };
    case 'undefined':
      return { [TAG]: 'undefined' };
    case 'number':
      if (Object.is(raw, -0)) return { [TAG]: 'number', v: '-0' };
      return Number.isFinite(raw) ? raw : { [TAG]: 'number', v: String(raw) };
    case 'function':
    case 'symbol':
      throw new TypeError(`a ${typeof raw} cannot be stored${k ? ` (at "${k}")` : ''}`);
  }
  if (raw instanceof Date) return { [TAG]: 'date', v: Number.isNaN(raw.getTime()) ? null : raw.toISOString() };
  if (raw instanceof Map) return { [TAG]: 'map', v: [...raw.entries()] };
  if (raw instanceof Set) return { [TAG]: 'set', v: [...raw] };
  if (raw instanceof Uint8Array) {
    return { [TAG]: 'bytes', v: Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('base64') };
  }
  if (raw instanceof ArrayBuffer) return { [TAG]: 'arraybuffer', v: Buffer.from(raw).toString('base64') };
  if (ArrayBuffer.isView(raw)) {
    const type = raw.constructor.name;
    if (!VIEWS.has(type)) throw new TypeError(`a ${type} cannot be stored${k ? ` (at "${k}")` : ''}`);
    return { [TAG]: 'view', v: [type, Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('base64')] };
  }
  if (raw instanceof WeakMap || raw instanceof WeakSet || raw instanceof Promise) {
    throw new TypeError(`a ${raw.constructor.name} cannot be stored${k ? ` (at "${k}")` : ''}`);
  }
  if (raw !== null && typeof raw === 'object' && Object.getOwnPropertySymbols(raw).some((s) => isEnumerable(raw, s))) {
    throw new TypeError(`a symbol-keyed property cannot be stored${k ? ` (at "${k}")` : ''}`);
  }
  if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.hasOwn(v, TAG)) {
    return { [TAG]: 'object', v: Object.entries(v) }; // a user object that happens to use our tag
  }
  return v;
}

/** The stored text of `value`; throws a TypeError for what cannot be stored. */
export function encode(value: unknown): string {
  const text = JSON.stringify(value, replacer) as string | undefined;
  // a toJSON that gives undefined (or a function) leaves nothing: refused, not stored as "undefined"
  if (text === undefined) throw new TypeError('the value serialises to nothing (its toJSON gave no JSON value)');
  return text;
}

/** The value `encode` stored. */
export function decode(text: string): unknown {
  return revive(JSON.parse(text));
}

/** Turns parsed JSON of `encode` back into the value (in place). */
export function revive(x: unknown): unknown {
  if (Array.isArray(x)) {
    for (let i = 0; i < x.length; i++) x[i] = revive(x[i]);
    return x;
  }
  if (x === null || typeof x !== 'object') return x;
  const o = x as Record<string, unknown>;
  if (typeof o[TAG] === 'string') return tagged(o as Tagged);
  // in place: an own "__proto__" from JSON.parse stays a plain data property
  for (const k of Object.keys(o)) o[k] = revive(o[k]);
  return o;
}

function tagged(t: Tagged): unknown {
  switch (t[TAG]) {
    case 'bigint':
      return BigInt(String(t.v));
    case 'undefined':
      return undefined;
    case 'number':
      return Number(t.v);
    case 'date':
      return new Date(t.v === null ? NaN : String(t.v));
    case 'map':
      return new Map(revive(t.v) as [unknown, unknown][]);
    case 'set':
      return new Set(revive(t.v) as unknown[]);
    case 'bytes':
      return Buffer.from(String(t.v), 'base64');
    case 'arraybuffer':
      return arrayBufferOf(String(t.v));
    case 'view': {
      const [type, data] = t.v as [string, string];
      const View = VIEWS.get(type);
      if (!View) throw new TypeError(`unknown stored view "${type}"`);
      return new View(arrayBufferOf(data));
    }
    case 'object':
      return Object.fromEntries(revive(t.v) as [string, unknown][]);
    default:
      throw new TypeError(`unknown stored tag "${t[TAG]}"`);
  }
}
