/**
 * Fencing at a Redis resource: `fencedSet` writes a value only if the writer's fence is at least
 * the highest fence that resource has accepted, in one script (check and write are atomic).
 */
import { BackendError, InvalidArgumentError, StaleFenceError } from '../../errors.js';
import { checkKey, checkString } from '../../validate.js';
import { adapt } from './adapt.js';
import { script, type RedisClientLike } from './client.js';

/** KEYS value highest; ARGV value fence → {1, fence} accepted | {0, highest} stale */
const FENCED_SET = script(`
local top = redis.call('GET', KEYS[2])
if top and string.len(top) > string.len(ARGV[2]) or (top and string.len(top) == string.len(ARGV[2]) and top > ARGV[2]) then
  return { 0, top }
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return { 1, ARGV[2] }
`);

/**
 * The Redis key that holds the value of resource `key`: `leasehold-resource:{key}`. Resources
 * live in their own namespace: every lock key starts with `{`, so no resource name can collide
 * with a lock (or its fence counter, queue, value or result).
 */
export const resourceKeyOf = (key: string): string => `leasehold-resource:{${key}}`;

/** The Redis key that holds the highest fence accepted for resource `key`. */
export const fenceKeyOf = (key: string): string => `${resourceKeyOf(key)}:fence-seen`;

/**
 * Sets resource `key` to `value` if `fence` is ≥ the highest fence accepted for it (equal passes:
 * the same holder writing again), else throws StaleFenceError and writes nothing. The value is
 * kept in `resourceKeyOf(key)` and its fence in `fenceKeyOf(key)`: one hash slot, and a
 * namespace of their own (a resource never overwrites a lock, whatever its name).
 */
export async function fencedSet(client: RedisClientLike, key: string, value: string, fence: bigint): Promise<void> {
  checkKey(key);
  checkString(value, 'fencedSet: value', Infinity, true); // well-formed: stored as UTF-8 as is
  if (typeof fence !== 'bigint' || fence < 0n)
    throw new InvalidArgumentError('fencedSet: fence must be a non-negative bigint');
  const adapter = adapt(client, 'fencedSet(client)');
  // fences compare as decimal strings of equal form (no leading zeros): length first, then text
  const [r] = await adapter.run([
    { script: FENCED_SET, keys: [resourceKeyOf(key), fenceKeyOf(key)], args: [value, fence.toString()] },
  ]);
  if (r instanceof Error) throw r;
  const [ok, top] = r as [number, string];
  if (Number(ok) === 1) return;
  if (!/^(0|[1-9][0-9]*)$/.test(String(top))) {
    // someone else wrote that key: no fence can be judged against it
    throw new BackendError(
      `fencedSet: the fence record of "${key}" (${fenceKeyOf(key)}) holds ${JSON.stringify(String(top).slice(0, 40))}, not a fence; nothing was written`,
    );
  }
  throw new StaleFenceError(key, fence, BigInt(top));
}
