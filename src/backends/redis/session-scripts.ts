/**
 * The scripts of session mode (session.ts): a session's renewal, the rare refresh of the long PX
 * of the locks that hang off it, and the server's eviction settings. The grant and release
 * scripts (scripts.ts) read a lock's session through its `alive` helper.
 */
import { script } from './client.js';

/**
 * KEYS session lost; ARGV ttl → { 0 } (the session lapsed or was deleted) | { 1, token… }: its
 * expiry is set to ttl again, and the tokens of its locks broken since (forceRelease) are told.
 */
export const RENEW_SESSION = script(`
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then return { 0 } end
local lost = redis.call('SMEMBERS', KEYS[2])
if #lost > 0 then redis.call('DEL', KEYS[2]) end
local out = { 1 }
for _, t in ipairs(lost) do out[#out + 1] = t end
return out
`);

/**
 * KEYS lock1 v1 fence1 …; ARGV value1 lockPx1 fenceTtl1 … → { 1 | 0, … }. The rare refresh of
 * the long PX of locks that hang off a session (value `<token>|<session>`): 0 if the lock is no
 * longer that value (deleted or overwritten from outside, even with another type).
 */
export const REFRESH_MANY = script(`
local out = {}
for i = 1, #KEYS, 3 do
  -- pcall: a key overwritten with another type (WRONGTYPE) is that lock lost, not an error
  -- that fails the whole renewal (and so every lease of the process)
  if redis.pcall('GET', KEYS[i]) == ARGV[i] then
    redis.call('PEXPIRE', KEYS[i], ARGV[i + 1])
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[i + 1])
    redis.call('PEXPIRE', KEYS[i + 2], ARGV[i + 2])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`);

/**
 * No KEYS or ARGV → { maxmemory, maxmemory-policy } as INFO shows them ('' when absent). INFO,
 * not CONFIG GET, which a script may not call and which is often renamed or disabled.
 */
export const EVICTION = script(`
local i = redis.call('INFO', 'memory')
return { string.match(i, 'maxmemory:(%d+)') or '', string.match(i, 'maxmemory_policy:([%w%-]+)') or '' }
`);
