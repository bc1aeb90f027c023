import { randomBytes } from 'node:crypto';
import { InvalidArgumentError } from './errors.js';

/** A key is a non-empty string of at most this many UTF-8 bytes. */
export const MAX_KEY_BYTES = 1024;

export function checkKey(key: unknown, what = 'key'): string {
  return checkString(key, what, MAX_KEY_BYTES);
}

/**
 * A key a recipe locks under a tag (`idem:<key>`, `election:<name>`): checked as the caller gave
 * it, with room left for the tag, so the message is about the caller's own key.
 */
export function checkTaggedKey(key: unknown, tag: string, what: string): string {
  const k = checkKey(key, what);
  const max = MAX_KEY_BYTES - Buffer.byteLength(tag);
  const n = Buffer.byteLength(k);
  if (n > max) {
    throw new InvalidArgumentError(
      `${what} is ${n} UTF-8 bytes; at most ${max} (it is locked as "${tag}…", at most ${MAX_KEY_BYTES} bytes)`,
    );
  }
  return k;
}

/**
 * A string that is stored or sent somewhere: non-empty (unless `allowEmpty`), at most `maxBytes`
 * UTF-8 bytes, and well-formed UTF-16 — a lone surrogate would become U+FFFD on the way, so
 * `'a\uD800'` and `'a\uDBFF'` would name the same lock.
 */
export function checkString(v: unknown, what: string, maxBytes: number, allowEmpty = false): string {
  if (typeof v !== 'string') throw new InvalidArgumentError(`${what} must be a string, got ${typeof v}`);
  if (v.length === 0 && !allowEmpty) throw new InvalidArgumentError(`${what} must not be empty`);
  if (!(v as string & { isWellFormed(): boolean }).isWellFormed()) {
    throw new InvalidArgumentError(`${what} is not well-formed UTF-16 (it holds a lone surrogate)`);
  }
  // a UTF-16 code unit is at most 3 UTF-8 bytes: short strings need no count
  if (Number.isFinite(maxBytes) && v.length * 3 > maxBytes) {
    const bytes = Buffer.byteLength(v, 'utf8');
    if (bytes > maxBytes)
      throw new InvalidArgumentError(`${what} is ${bytes} UTF-8 bytes; at most ${maxBytes} are allowed`);
  }
  return v;
}

/**
 * Rejects anything but a plain object (its prototype `Object.prototype` or null) or undefined, and
 * any option name not in `allowed`. A Map, a Date or a class instance is refused: its entries or
 * fields are not its own enumerable properties, so `new Map([['ttl', 5]])` would be read as `{}`.
 */
export function checkOptions<T extends object>(opts: unknown, allowed: readonly string[], where: string): Partial<T> {
  if (opts === undefined) return {};
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts))
    throw new InvalidArgumentError(`${where}: options must be an object`);
  const proto: unknown = Object.getPrototypeOf(opts);
  if (proto !== Object.prototype && proto !== null) {
    const name = (opts as { constructor?: { name?: unknown } }).constructor?.name;
    const got = typeof name === 'string' && name !== '' ? `a ${name}` : 'an object with another prototype';
    throw new InvalidArgumentError(`${where}: options must be a plain object ({ … }), got ${got}`);
  }
  for (const name of Object.keys(opts)) {
    if (!allowed.includes(name)) {
      throw new InvalidArgumentError(`${where}: unknown option "${name}" (known: ${allowed.join(', ')})`);
    }
  }
  return opts as Partial<T>;
}

export function checkSignal(signal: unknown, where: string): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (!(signal instanceof AbortSignal)) throw new InvalidArgumentError(`${where}: signal must be an AbortSignal`);
  return signal;
}

export function checkBoolean(v: unknown, name: string): boolean | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') throw new InvalidArgumentError(`${name} must be a boolean`);
  return v;
}

const TOKEN_BYTES = 18;
/** CSPRNG bytes for this many tokens are drawn at once (as `crypto.randomUUID` caches entropy). */
const POOL_TOKENS = 128;
let pool = Buffer.alloc(0);
let offset = 0;

/** A fresh secret token: 144 random bits from the CSPRNG, base64url. */
export function newToken(): string {
  if (offset + TOKEN_BYTES > pool.length) {
    pool = randomBytes(TOKEN_BYTES * POOL_TOKENS);
    offset = 0;
  }
  const token = pool.toString('base64url', offset, offset + TOKEN_BYTES);
  pool.fill(0, offset, offset + TOKEN_BYTES); // handed out: not kept in the pool
  offset += TOKEN_BYTES;
  return token;
}
