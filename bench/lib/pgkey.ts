import { createHash } from 'node:crypto';

/** A signed 64-bit advisory key, as a decimal string, from a SHA-256 of the key. */
export function advisoryKeyOf(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest().readBigInt64BE(0).toString();
}
