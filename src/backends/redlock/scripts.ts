/**
 * Per-node Lua scripts of the Redlock backend. Per key, every node stores the lock `{key}` (value:
 * the holder's token, with a PX expiry) and the fence counter `{key}:fence` (no expiry: it must
 * only ever grow). Fences travel as decimal strings, compared by length then lexically, so they
 * stay exact past 2^53. Releases publish on `{key}:released`.
 */
import { script } from '../redis/client.js';

export const lockKey = (key: string) => `{${key}}`;
export const fenceKey = (key: string) => `{${key}}:fence`;
export const channelOf = (key: string) => `{${key}}:released`;

/** KEYS: lock, fence. ARGV: token, ttlMs. → {1, counter} granted, {0} held. */
export const ACQUIRE = script(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('GET', KEYS[2]) or '0'}
end
return {0}
`);

/**
 * KEYS: lock, fence. ARGV: token, fence. Writes the fence back only while the lock is still this
 * token's and only upward. → 1 stored (or already higher), 0 not our lock any more.
 */
export const WRITE_FENCE = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local cur = redis.call('GET', KEYS[2])
if (not cur) or #cur < #ARGV[2] or (#cur == #ARGV[2] and cur < ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`);

/** KEYS: lock. ARGV: token, ttlMs. → 1 extended, 0 not ours. */
export const EXTEND = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`);

/** KEYS: lock. ARGV: token, channel, publish ('1' | '0'). → 1 deleted, 0 not ours. */
export const RELEASE = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[3] == '1' then redis.call('PUBLISH', ARGV[2], '1') end
  return 1
end
return 0
`);

/**
 * KEYS: lock, fence. → {0} free, or {1, sha1(token), pttl, counter}. Only a digest of the token
 * leaves the node, so holders can be compared across nodes without ever revealing a token.
 */
export const INSPECT = script(`
local t = redis.call('GET', KEYS[1])
if not t then return {0} end
return {1, redis.sha1hex(t), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0'}
`);

/** KEYS: lock. → PTTL: -2 free, -1 held without expiry, else ms left. */
export const PTTL = script(`return redis.call('PTTL', KEYS[1])`);
