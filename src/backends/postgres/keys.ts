/**
 * Key hashing and argument checks shared by session mode, transaction mode and fencing.
 *
 * The advisory key is the first 8 bytes of SHA-256 over the UTF-8 namespaced key, read as a
 * signed big-endian 64-bit integer: the same on every Node version, every Postgres release and
 * both client libraries (unlike `hashtext`, which is 32-bit, undocumented and has changed).
 */
import { InvalidArgumentError } from '../../errors.js';
import { digest } from '../../hash.js';
import { MAX_KEY_BYTES, checkKey as checkUserKey, checkOptions as checkOpts, checkString } from '../../validate.js';

/**
 * The signed 64-bit advisory lock key for a namespaced key such as `leasehold:order:42`, in the
 * fence tables' `schema` (unquoted). The default schema, `public`, hashes the key alone; another
 * one hashes `<schema> NUL <key>` (a key holds no NUL): its own namespace of locks, as it has its
 * own fences. Throws `InvalidArgumentError` for a key that is not a non-empty, well-formed string
 * of at most 1,281 UTF-8 bytes (a 256-byte prefix, `:`, a 1,024-byte key) without NUL, or a
 * schema that is not a plain SQL identifier.
 */
export function advisoryKey(fullKey: string, schema: string = DEFAULT_SCHEMA): bigint {
  // what the backends pass: `<prefix>:<key>`, each checked by the library's rules (a prefix of
  // ≤ 256 UTF-8 bytes, a key of ≤ MAX_KEY_BYTES), no NUL (Postgres text); a schema as postgres()
  // takes it. A bad argument throws here rather than hashing to some other lock.
  checkString(fullKey, 'advisoryKey(): fullKey', MAX_KEY_BYTES + 257);
  if (fullKey.includes('\u0000')) {
    throw new InvalidArgumentError('advisoryKey(): fullKey must not contain NUL characters (Postgres text)');
  }
  if (schema !== DEFAULT_SCHEMA) quoteIdent(schema, 'advisoryKey(): schema');
  const text = schema === DEFAULT_SCHEMA ? fullKey : `${schema}\u0000${fullKey}`;
  let k = recent.get(text);
  if (k === undefined) {
    k = digest('sha256', text).readBigInt64BE(0);
    // the keys locked lately (an acquire and its release hash the same key): bounded, oldest out
    if (recent.size >= RECENT) recent.delete(recent.keys().next().value!);
    recent.set(text, k);
  }
  return k;
}

/** The schema of the fence tables when none is given. */
export const DEFAULT_SCHEMA = 'public';

/** How many recent keys keep their advisory key (a SHA-256 per call otherwise). */
const RECENT = 1024;
const recent = new Map<string, bigint>();

const INT8_MIN = -(2n ** 63n);
const INT8_MAX = 2n ** 63n - 1n;

/**
 * How `pg_locks` shows a one-argument (bigint) advisory lock: `classid` holds the high 32 bits,
 * `objid` the low 32 bits (both unsigned), `objsubid` is 1. Decimal strings, for SQL parameters.
 */
export function lockParts(key: bigint): { classid: string; objid: string } {
  // an advisory key is a signed int8: anything else (a number, a value out of range, which would
  // wrap around to another lock's parts) is refused
  if (typeof key !== 'bigint' || key < INT8_MIN || key > INT8_MAX) {
    throw new InvalidArgumentError(`lockParts(): key must be a bigint between -2^63 and 2^63-1, got ${describe(key)}`);
  }
  const u = BigInt.asUintN(64, key);
  return { classid: String(u >> 32n), objid: String(u & 0xffffffffn) };
}

/** A user key: the library-wide rule (non-empty, ≤ 1,024 UTF-8 bytes), and no NUL (Postgres text). */
export function checkKey(key: unknown, name = 'key'): asserts key is string {
  checkUserKey(key, name);
  if ((key as string).includes('\u0000')) {
    throw new InvalidArgumentError(`${name} must not contain NUL characters (Postgres text)`);
  }
}

/** A string stored as Postgres text (a holder value, say): no NUL, which text cannot hold. */
export function checkText(value: string, what: string): void {
  if (value.includes('\u0000'))
    throw new InvalidArgumentError(`${what} must not contain NUL characters (Postgres text)`);
}

/** A namespaced key as the engine passes it (already validated there; checked again cheaply). */
export function checkFullKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || key.length === 0) throw new InvalidArgumentError(`key must be a non-empty string`);
  // the namespaced key is shown: the NUL may be in the prefix, not in the key the caller passed
  if (key.includes('\u0000')) {
    const shown = JSON.stringify(key.length > 300 ? `${key.slice(0, 300)}…` : key);
    throw new InvalidArgumentError(`key and prefix must not contain NUL characters (Postgres text), got ${shown}`);
  }
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

/** Validates a schema or channel name and returns it double-quoted for SQL text. */
export function quoteIdent(value: unknown, name: string): string {
  if (typeof value !== 'string' || !IDENT.test(value)) {
    throw new InvalidArgumentError(
      `${name} must be a plain SQL identifier (letters, digits, _ and $; ≤ 63), got ${describe(value)}`,
    );
  }
  return `"${value}"`;
}

/** Rejects a non-object options argument and unknown option names (the library-wide check). */
export function checkOptions(opts: unknown, allowed: readonly string[], what: string): Record<string, unknown> {
  return checkOpts<Record<string, unknown>>(opts, allowed, what);
}

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  return typeof value === 'object' || typeof value === 'function' ? typeof value : String(value);
}
