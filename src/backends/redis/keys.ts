/**
 * The Redis keys of a lock and the chunk size of the many-lease scripts: what the backend
 * (index.ts) and its session mode (session.ts) both use.
 */
import { InvalidArgumentError } from '../../errors.js';

/** The lock's own Redis key (its hash tag): what waits and hand-overs are keyed by. */
export const lockKeyOf = (key: string): string => `{${key}}`;

/**
 * On a Cluster, the full key `key` cannot be used when the hash tag of its lock key as sent
 * (`<client keyPrefix>{<key>}`) is empty: Redis hashes the part between the first '{' and the
 * first '}' after it, or the whole key when that part is empty ('}' first in `key`, as with a
 * prefix '}app'), and the lock and its fence counter would then land in different slots
 * (CROSSSLOT at every acquire). Any other '{' or '}' in the key still gives every key of the
 * lock one tag, and a single server has no slots: those keys are left as they are.
 */
export function checkClusterKey(keyPrefix: string, key: string): void {
  const k = `${keyPrefix}{${key}}`;
  const open = k.indexOf('{');
  if (k.indexOf('}', open + 1) !== open + 1) return;
  throw new InvalidArgumentError(
    `redis: on a Cluster a lock key cannot begin with '}' (the key's hash tag would be empty, its keys in different slots): ${JSON.stringify(key.slice(0, 64))}`,
  );
}

/** The Redis keys of one lock. */
export function redisKeys(key: string) {
  const k = lockKeyOf(key);
  return {
    lock: k,
    fence: `${k}:fence`,
    q: `${k}:q`,
    qx: `${k}:qx`,
    value: `${k}:v`,
    result: `${k}:result`,
    qv: `${k}:qv`,
    changed: `${k}:changed`,
  };
}

/** Leases per EXTEND_MANY call (all calls of a tick are pipelined together). */
export const CHUNK = 256;

/**
 * ACQUIRE's and RELEASE's keys on a Cluster: every key they may touch (scripts.ts, ACQUIRE, says
 * why); a single server passes the lock and its fence counter only.
 */
export const declared = (lock: string): string[] => [
  lock,
  `${lock}:fence`,
  `${lock}:q`,
  `${lock}:qx`,
  `${lock}:v`,
  `${lock}:qv`,
];
