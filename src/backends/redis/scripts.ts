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

/**
 * Lua shared by the scripts that hand the lock on: drops waiters whose place expired from the
 * head of the queue and returns the first live one (or nil). `now` in ms from TIME.
 */
const HEAD = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function live_head(q, qx, now)
  for _ = 1, 64 do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then return nil end
    local exp = tonumber(redis.call('ZSCORE', qx, head))
    if exp and exp > now then return head end
    redis.call('ZREM', q, head)
    redis.call('ZREM', qx, head)
  end
  return redis.call('ZRANGE', q, 0, 0)[1]
end
`;

/**
 * KEYS lock fence q qx v; ARGV token ttl queue(0|1) value(''=none).
 * → fence as a string (granted) | -pttl of the holder (0 if unknown): refused.
 * Fast path: no queue and a free lock is SET NX + INCR. Otherwise only the head of the arrival
 * queue may take a free lock; a refused caller with queue=1 joins (or refreshes its place in)
 * the queue, its place expiring after ttl.
 */
export const ACQUIRE = script(
  HEAD +
    `
local ttl = tonumber(ARGV[2])
local function grant()
  if ARGV[4] ~= '' then redis.call('SET', KEYS[5], ARGV[4], 'PX', ttl) end
  redis.call('INCR', KEYS[2])
  return redis.call('GET', KEYS[2]) -- exact: Lua numbers are doubles
end
if redis.call('EXISTS', KEYS[3]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ttl) then return grant() end
  if ARGV[3] ~= '1' then return -math.max(redis.call('PTTL', KEYS[1]), 0) end
end
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = live_head(KEYS[3], KEYS[4], now)
  if (not head) or head == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
    if head then
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('ZREM', KEYS[4], ARGV[1])
    end
    return grant()
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
return -math.max(redis.call('PTTL', KEYS[1]), 0)
`,
);

/**
 * KEYS lock1 v1 lock2 v2 …; ARGV token1 ttl1 token2 ttl2 … → { 1 | 0, … }. Token-checked
 * PEXPIRE of many leases in one call (keys of several slots: single-node Redis only).
 */
export const EXTEND_MANY = script(`
local out = {}
for i = 1, #KEYS, 2 do
  local j = i
  if redis.call('GET', KEYS[i]) == ARGV[j] then
    redis.call('PEXPIRE', KEYS[i], ARGV[j + 1])
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[j + 1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`);

/** KEYS lock v; ARGV token ttl → 1 | 0 (one lease; for Redis Cluster clients) */
export const EXTEND = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
`);

/**
 * KEYS lock v q qx; ARGV token channel → 1 | 0. Wakes only the head of the queue: publishes
 * the SHA-1 of its token (never the token); with nobody queued it publishes nothing.
 */
export const RELEASE = script(
  HEAD +
    `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
if redis.call('EXISTS', KEYS[3]) == 1 then
  local head = live_head(KEYS[3], KEYS[4], now_ms())
  if head then redis.call('PUBLISH', ARGV[2], redis.sha1hex(head)) end
end
return 1
`,
);

/** KEYS q qx lock; ARGV token channel. A waiter gives up its place; wakes the next head. */
export const LEAVE = script(
  HEAD +
    `
local was = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if was == ARGV[1] and redis.call('EXISTS', KEYS[3]) == 0 then
  local head = live_head(KEYS[1], KEYS[2], now_ms())
  if head then redis.call('PUBLISH', ARGV[2], redis.sha1hex(head)) end
end
return 0
`,
);

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
