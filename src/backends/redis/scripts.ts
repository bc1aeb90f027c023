/**
 * The single-node Redis scripts. Every key of one lock shares the hash tag `{<key>}`, so each
 * script touches one slot (Redis Cluster). Keys travel as KEYS, tokens and TTLs as ARGV.
 *
 *   {k}       the lock: token, PX ttl
 *   {k}:fence the fence counter (INCR, never expires: fences are never reused)
 *   {k}:q     arrival queue of waiters (ZSET token → arrival ms)
 *   {k}:qx    expiry of each waiter's place (ZSET token → expiry ms); refreshed on each attempt
 *   {k}:v     holder value (election), same PX as the lock
 */
import { script } from './client.js';

/** KEYS lock fence q qx v; ARGV token ttl queue(0|1) value(''=none). → fence as string | -pttl hint */
export const ACQUIRE = script(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 64)
for i = 1, #dead do
  redis.call('ZREM', KEYS[3], dead[i])
  redis.call('ZREM', KEYS[4], dead[i])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if (not head) or head == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
    if head then
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('ZREM', KEYS[4], ARGV[1])
    end
    if ARGV[4] ~= '' then redis.call('SET', KEYS[5], ARGV[4], 'PX', ttl) end
    return tostring(redis.call('INCR', KEYS[2]))
  end
end
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[3], 'NX', now, ARGV[1])
  redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[3]) < ttl then
    redis.call('PEXPIRE', KEYS[3], ttl)
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then return 0 end
return -pttl
`);

/** KEYS lock v; ARGV token ttl → 1 | 0 */
export const EXTEND = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  return 1
end
return 0
`);

/** KEYS lock v; ARGV token channel → 1 | 0. Publishes to wake waiters. */
export const RELEASE = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
`);

/** KEYS q qx lock; ARGV token channel. A waiter gives up its place; wakes the next one. */
export const LEAVE = script(`
local was = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if was == ARGV[1] and redis.call('EXISTS', KEYS[3]) == 0 then redis.call('PUBLISH', ARGV[2], '1') end
return 0
`);

/** KEYS lock fence v → { fence, pttl, value } or false */
export const INSPECT = script(`
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return { redis.call('GET', KEYS[2]) or '0', redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[3]) or false }
`);

/** KEYS lock result; ARGV token value ttl → 1 if stored (the lock is still this token's) | 0 */
export const PUT_RESULT = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
`);

/** KEYS result → the stored result or nil (a script, so both clients read it the same way) */
export const GET_RESULT = script(`return redis.call('GET', KEYS[1])`);
