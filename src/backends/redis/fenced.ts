/**
 * Fencing at a Redis resource: `fencedSet` writes a value only if the writer's fence is at least
 * the highest fence that resource has accepted, in one script (check and write are atomic).
 */
import { InvalidArgumentError, StaleFenceError } from '../../errors.js';
import { checkKey } from '../../validate.js';
import { adapt, script } from './client.js';

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

/** The Redis key that holds the highest fence accepted for `key`. */
export const fenceKeyOf = (key: string): string => `{${key}}:fence-seen`;

/**
 * Sets `key` to `value` if `fence` is ≥ the highest fence accepted for `key` (equal passes: the
 * same holder writing again), else throws StaleFenceError and writes nothing. The value key is
 * `{key}` and its fence is kept in `{key}:fence-seen`, so both live in one slot.
 */
export async function fencedSet(client: unknown, key: string, value: string, fence: bigint): Promise<void> {
  checkKey(key);
  if (typeof value !== 'string') throw new InvalidArgumentError('fencedSet: value must be a string');
  if (typeof fence !== 'bigint' || fence < 0n)
    throw new InvalidArgumentError('fencedSet: fence must be a non-negative bigint');
  const adapter = adapt(client, 'fencedSet(client)');
  // fences compare as decimal strings of equal form (no leading zeros): length first, then text
  const [r] = await adapter.run([
    { script: FENCED_SET, keys: [`{${key}}`, fenceKeyOf(key)], args: [value, fence.toString()] },
  ]);
  if (r instanceof Error) throw r;
  const [ok, top] = r as [number, string];
  if (Number(ok) !== 1) throw new StaleFenceError(key, fence, BigInt(top));
}
