/** One-shot digests: every token digest, advisory key, hand-over check and script SHA of the backends. */
import * as crypto from 'node:crypto';

type OneShot = (algorithm: string, data: string, encoding: 'buffer' | 'hex') => Buffer | string;
/** `crypto.hash` (Node ≥ 20.12: one call, no Hash object, about twice as fast), else createHash. */
const oneShot = (crypto as { hash?: OneShot }).hash;

/** The digest of the UTF-8 string `s` as bytes. */
export function digest(algorithm: 'sha1' | 'sha256', s: string): Buffer {
  return oneShot
    ? (oneShot(algorithm, s, 'buffer') as Buffer)
    : crypto.createHash(algorithm).update(s, 'utf8').digest();
}

/** The digest of the UTF-8 string `s` in lower-case hex (as Redis's `redis.sha1hex`). */
export function digestHex(algorithm: 'sha1' | 'sha256', s: string): string {
  return oneShot
    ? (oneShot(algorithm, s, 'hex') as string)
    : crypto.createHash(algorithm).update(s, 'utf8').digest('hex');
}
