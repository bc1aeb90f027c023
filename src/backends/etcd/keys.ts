/**
 * The etcd key layout. A lock `k` (the engine's namespaced key) is the set of entries under
 * `esc(k)/`, one per holder or waiter, each `esc(k)/<lease id, hex>-<token digest>`; the holder is
 * the entry with the lowest create revision, and that revision is its fence. `esc` escapes `%`
 * and `/`, so the entries of one lock never fall under the prefix of another. An idempotency
 * result lives at `esc(k)!result` (no `/`: never taken for an entry).
 */
import { digest } from '../../hash.js';

export const esc = (key: string): string => key.replace(/%/g, '%25').replace(/\//g, '%2F');
export const unesc = (key: string): string => key.replace(/%2F/g, '/').replace(/%25/g, '%');

/** The prefix of the entries of lock `key`. */
export const entriesOf = (key: string): string => `${esc(key)}/`;
/** The entry of one acquire (a token) under one etcd lease. */
export const entryKey = (key: string, leaseId: string, token: string): string =>
  `${entriesOf(key)}${BigInt(leaseId).toString(16)}-${digestOf(token)}`;
export const resultKey = (key: string): string => `${esc(key)}!result`;
/**
 * One key per etcd lease (under it), rewritten by each release with a nonce of its own: the proof
 * that a release etcd3 sent again after a lost reply was deleted by its first send. `%r` never
 * starts an escaped key, and without a `/` it is never taken for an entry (list, inspect).
 */
export const releasedKey = (leaseId: string): string => `%released-${BigInt(leaseId).toString(16)}`;

/** The token is never stored: a short digest names the entry (192 bits, base64url). */
export const digestOf = (token: string): string => digest('sha256', token).subarray(0, 24).toString('base64url');

/** The end of a prefix range: the prefix with its last byte incremented (etcd's convention). */
export function rangeEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]!++;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]); // the whole keyspace
}

/** The lock an entry key belongs to (null for keys that are not entries, e.g. results). */
export function lockOfEntry(entry: string): string | null {
  const slash = entry.lastIndexOf('/');
  if (slash <= 0) return null;
  return unesc(entry.slice(0, slash));
}

/** Holder values are stored as `=value`; an entry without one is empty. */
export const encodeValue = (value: string | undefined): string => (value === undefined ? '' : `=${value}`);
export const decodeValue = (raw: Buffer | string | undefined): string | undefined => {
  const s = raw === undefined ? '' : raw.toString();
  return s.startsWith('=') ? s.slice(1) : undefined;
};
