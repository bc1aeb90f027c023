import { randomBytes } from 'node:crypto';
import { InvalidArgumentError } from './errors.js';

/** A key is a non-empty string of at most this many UTF-8 bytes. */
export const MAX_KEY_BYTES = 1024;

export function checkKey(key: unknown, what = 'key'): string {
  if (typeof key !== 'string') throw new InvalidArgumentError(`${what} must be a string, got ${typeof key}`);
  if (key.length === 0) throw new InvalidArgumentError(`${what} must not be empty`);
  const bytes = Buffer.byteLength(key, 'utf8');
  if (bytes > MAX_KEY_BYTES)
    throw new InvalidArgumentError(`${what} is ${bytes} UTF-8 bytes; at most ${MAX_KEY_BYTES} are allowed`);
  return key;
}

/** Rejects anything but a plain object (or undefined) and any option name not in `allowed`. */
export function checkOptions<T extends object>(opts: unknown, allowed: readonly string[], where: string): Partial<T> {
  if (opts === undefined) return {};
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts))
    throw new InvalidArgumentError(`${where}: options must be an object`);
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

/** A fresh secret token: 144 random bits from the CSPRNG, base64url. */
export function newToken(): string {
  return randomBytes(18).toString('base64url');
}
