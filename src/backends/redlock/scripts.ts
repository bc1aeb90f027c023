/**
 * Per-node Lua scripts of the Redlock backend. Per key, every node stores
 *
 *   {key}         the lock: `<attempt id><token>` with a PX expiry. The attempt id (ID_LEN hex
 *                 characters, fresh per acquire attempt) lets the clean-up of a failed attempt
 *                 delete only that attempt's copy, never one a later attempt with the same token set
 *   {key}:v       the holder value (election), same expiry as the lock
 *   {key}:fence   the fence counter: seeded from the node's TIME in µs when missing, else INCR;
 *                 expires after `fenceIdle` without a grant, write-back or renewal
 *   {key}:pin     the holder's fence on a node whose counter is above it (a node that granted
 *                 after the decision, with a higher counter of its own), same expiry as the lock
 *   {key}:result  an idempotency result, written token-checked by the holder
 *   {key}:q       the waiter registry: a sorted set of waiting backends' wake channels, scored by
 *                 the waiter's arrival time (the client's ms, so every node orders them alike)
 *   {key}:qx      the same channels scored by place expiry (the node's ms): a waiter refreshes its
 *                 place with every attempt, a dead waiter's place lapses; both keys expire with
 *                 the last place
 *
 * Releases publish the wake message to the head waiter's channel only (the next live waiter on
 * that node), and on `{key}:released` (observers only); grants and fence write-backs publish on
 * `{key}:granted` (observers only). Fences travel as decimal strings, compared by length then
 * lexically, so they stay exact past 2^53.
 */
import { script } from '../redis/client.js';

export const lockKey = (key: string) => `{${key}}`;
export const fenceKey = (key: string) => `{${key}}:fence`;
export const valueKey = (key: string) => `{${key}}:v`;
export const pinKey = (key: string) => `{${key}}:pin`;
export const resultKey = (key: string) => `{${key}}:result`;
export const channelOf = (key: string) => `{${key}}:released`;
export const grantedChannelOf = (key: string) => `{${key}}:granted`;
export const queueKey = (key: string) => `{${key}}:q`;
export const placesKey = (key: string) => `{${key}}:qx`;

/** Length of the attempt id that prefixes the token in the stored lock value. */
export const ID_LEN = 16;

/**
 * Lua: does the stored lock value `v` belong to token ARGV[t] (any attempt when ARGV[a] is '',
 * else exactly attempt ARGV[a])?
 */
const MATCH = `
local function ours(v, t, a)
  if not v then return false end
  if a == '' then return string.sub(v, ${ID_LEN + 1}) == t end
  return v == a .. t
end
`;

/**
 * Lua: wakes the next waiter of a lock just freed on this node. Drops the places that lapsed (at
 * most 100), publishes `msg` to the head's channel only, and cuts the head's place to its turn
 * (`turn` ms): a head that does not come for the free lock in that time (dead, its message lost)
 * loses its place to the next waiter; a live one registers again on its next attempt, with its
 * arrival. `except`: a waiter whose place is left alone (a failed attempt's own clean-up).
 */
const WAKE = `
local function wake_head(q, qx, msg, except, turn)
  if not redis.call('ZRANGE', q, 0, 0)[1] then return end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local dead = redis.call('ZRANGEBYSCORE', qx, '-inf', string.format('%.0f', now), 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', q, unpack(dead))
    redis.call('ZREM', qx, unpack(dead))
  end
  local h = redis.call('ZRANGE', q, 0, 0)[1]
  if not h then return end
  redis.call('PUBLISH', h, msg)
  if h == except then return end
  local exp = tonumber(redis.call('ZSCORE', qx, h))
  if exp and exp > now + turn then redis.call('ZADD', qx, string.format('%.0f', now + turn), h) end
end
`;

/**
 * KEYS: lock, fence, value, pin, waiter queue, places. ARGV: id..token, ttlMs, hasValue ('1' | '0'),
 * value, fenceIdleMs, granted channel, wake channel ('' = not waiting), arrival ms, place ms.
 * → {1, counter} granted (the node's counter after this grant), {0} held, or {0, pttl, node ms}
 * held and the caller's wake channel is (re)registered in the waiter queue with a place of
 * `place ms` (the node's time lets the caller align its arrivals to the nodes' clock).
 * Fair: while waiters are queued, a free lock goes only to the live head of the queue (the
 * lowest arrival; places that lapsed are dropped on the way, and the caller's own place counts as
 * live: it is attempting now). A waiting caller not registered here yet counts with its arrival:
 * one that arrived before the head but whose attempt reaches this node after a release woke that
 * head is the head (refused, it would be registered first and nobody would wake it). Anyone else
 * is refused as if the lock were held — a waiting caller is registered, a caller that does not
 * wait (tryAcquire) never barges past the queue.
 * A grant removes the caller's place; the clean-up of a failed attempt registers it again with
 * the same arrival, so the nodes keep agreeing on the head.
 * The counter: INCR; if that made it 1 it was missing (or 0), so it is seeded from TIME in µs.
 * Lean on purpose: on a small machine the node's time per script shows in every acquire; with
 * nobody queued the fairness costs one EXISTS.
 */
export const ACQUIRE = script(`
local me = ARGV[7]
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local function live_head()
  for _ = 1, 16 do
    local h = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
    if not h or h == me then return h end
    local exp = tonumber(redis.call('ZSCORE', KEYS[6], h))
    if exp and exp > clock() then return h end
    -- the head is dead: it goes, and with it every lapsed place but the caller's, in bulk
    local dead = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', string.format('%.0f', clock()), 'LIMIT', 0, 500)
    local drop = { h }
    for _, d in ipairs(dead) do
      if d ~= me and d ~= h then drop[#drop + 1] = d end
    end
    redis.call('ZREM', KEYS[5], unpack(drop))
    redis.call('ZREM', KEYS[6], unpack(drop))
  end
  -- still no live head after 8000 dead waiters: none is known, never an unchecked one
  return nil
end
local head = false
if redis.call('EXISTS', KEYS[5]) == 1 then
  head = live_head()
  -- a waiter that arrived before the head, but reaches this node only now (after a release woke
  -- that head), would be registered ahead of it: it is the head
  if head and head ~= me and me ~= '' and tonumber(ARGV[8]) < tonumber(redis.call('ZSCORE', KEYS[5], head)) then
    head = me
  end
end
if (head and head ~= me) or not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if me == '' then return {0} end
  redis.call('ZADD', KEYS[5], 'NX', ARGV[8], me)
  redis.call('ZADD', KEYS[6], string.format('%.0f', clock() + tonumber(ARGV[9])), me)
  redis.call('PEXPIRE', KEYS[5], ARGV[9])
  redis.call('PEXPIRE', KEYS[6], ARGV[9])
  return {0, redis.call('PTTL', KEYS[1]), now}
end
if head then
  redis.call('ZREM', KEYS[5], me)
  redis.call('ZREM', KEYS[6], me)
end
if ARGV[3] == '1' then
  redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2])
  redis.call('DEL', KEYS[4])
else
  redis.call('DEL', KEYS[3], KEYS[4])
end
local c = redis.call('INCR', KEYS[2])
if c == 1 then
  local t = redis.call('TIME')
  c = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('SET', KEYS[2], c, 'PX', math.max(tonumber(ARGV[5]), tonumber(ARGV[2])))
else
  redis.call('PEXPIRE', KEYS[2], math.max(tonumber(ARGV[5]), tonumber(ARGV[2])))
  -- Lua numbers are doubles: exact below 2^53, else read the counter back as a string
  if c < 9007199254740992 then c = string.format('%.0f', c) else c = redis.call('GET', KEYS[2]) end
end
redis.call('PUBLISH', ARGV[6], '1')
return {1, c}
`);

/**
 * KEYS: lock, fence. ARGV: id..token, fence, fenceIdleMs, granted channel. Writes the fence back
 * only while this very attempt's copy is there, and only upward. → 1 stored (or already higher),
 * 0 not this attempt's lock.
 */
export const WRITE_FENCE = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local cur = redis.call('GET', KEYS[2])
if (not cur) or #cur < #ARGV[2] or (#cur == #ARGV[2] and cur < ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', math.max(tonumber(ARGV[3]), redis.call('PTTL', KEYS[1])))
  redis.call('PUBLISH', ARGV[4], '1')
end
return 1
`);

/** KEYS: lock, value, fence, pin. ARGV: token, ttlMs, attempt id ('' = any), fenceIdleMs. → 1 | 0. */
export const EXTEND = script(
  MATCH +
    `
if not ours(redis.call('GET', KEYS[1]), ARGV[1], ARGV[3]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[4], ARGV[2])
redis.call('PEXPIRE', KEYS[3], math.max(tonumber(ARGV[4]), tonumber(ARGV[2])))
return 1
`,
);

/**
 * KEYS: lock, value, pin, fence, waiter queue, places. ARGV: token, attempt id ('' = any attempt
 * of this token), released channel, publish ('1' | '0'), floor ('' = none), fenceIdleMs, wake
 * message, the releasing backend's own wake channel ('' = keep it), and for the clean-up of a
 * failed waiting attempt its place (wake channel or '', arrival ms, place ms): registered as its
 * refusal would have, so every node keeps the same head; then the head's turn (ms). → 1 deleted,
 * 0 not ours.
 * A holder that saw a higher counter on some node (a counter seeded later) raises the counter of
 * every node it held to that floor as it lets go, so the nodes' counters come back in step and
 * the next grant is one round again.
 * With publish: the releaser's own place and the places that lapsed are dropped from the waiter queue (at most 100 per call),
 * and the wake message goes to the head's channel only — one waiting backend, not every waiter.
 * The head's place is cut to its turn: it lapses unless the head attempts within `turn` ms, so a
 * dead head holds the queue up for at most that long (plus the next waiter's refresh).
 */
export const RELEASE = script(
  MATCH +
    WAKE +
    `
-- the releaser's place goes on every node, held there or not (a stale place would put it first)
if ARGV[8] ~= '' and redis.call('ZREM', KEYS[5], ARGV[8]) == 1 then redis.call('ZREM', KEYS[6], ARGV[8]) end
if not ours(redis.call('GET', KEYS[1]), ARGV[1], ARGV[2]) then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
if ARGV[5] ~= '' then
  local cur = redis.call('GET', KEYS[4])
  if (not cur) or #cur < #ARGV[5] or (#cur == #ARGV[5] and cur < ARGV[5]) then
    redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
  end
end
if ARGV[9] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[5], 'NX', ARGV[10], ARGV[9])
  redis.call('ZADD', KEYS[6], string.format('%.0f', now + tonumber(ARGV[11])), ARGV[9])
  redis.call('PEXPIRE', KEYS[5], ARGV[11])
  redis.call('PEXPIRE', KEYS[6], ARGV[11])
end
if ARGV[4] == '1' then
  redis.call('PUBLISH', ARGV[3], '1')
  wake_head(KEYS[5], KEYS[6], ARGV[7], ARGV[9], tonumber(ARGV[12]))
end
return 1
`,
);

/**
 * KEYS: waiter queue, places, lock. ARGV: wake channel, wake message, turn ms. A waiter that gave
 * up leaves the queue. If it was the head and the lock is free here (it was woken and gave up
 * before it came), the next waiter is woken as by a release. → 1 | 0.
 */
export const LEAVE = script(
  WAKE +
    `
local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1] == ARGV[1]
redis.call('ZREM', KEYS[2], ARGV[1])
local left = redis.call('ZREM', KEYS[1], ARGV[1])
if head and redis.call('EXISTS', KEYS[3]) == 0 then wake_head(KEYS[1], KEYS[2], ARGV[2], '', tonumber(ARGV[3])) end
return left
`,
);

/**
 * KEYS: lock, pin, fence, value. ARGV: id..token, fence, granted channel. A node whose counter is
 * above the holder's fence records that fence for this copy (inspect reads it instead of the
 * counter), only while this very attempt's copy is there. → 1 | 0.
 */
export const PIN = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl) else redis.call('SET', KEYS[2], ARGV[2]) end
redis.call('PUBLISH', ARGV[3], '1')
return 1
`);

/**
 * KEYS: lock, fence, value, pin. → {0} free, or {1, sha1(token), pttl, fence, value | nil}, where
 * fence is the pin if there is one, else the counter. Only a digest of the token leaves the node,
 * so holders can be compared across nodes without ever revealing a token (attempts of one token
 * count as one holder).
 */
export const INSPECT = script(`
local v = redis.call('GET', KEYS[1])
if not v then return {0} end
local t = string.sub(v, ${ID_LEN + 1})
local f = redis.call('GET', KEYS[4]) or redis.call('GET', KEYS[2]) or '0'
return {1, redis.sha1hex(t), redis.call('PTTL', KEYS[1]), f, redis.call('GET', KEYS[3]) or false}
`);

/** KEYS: lock. → PTTL: -2 free, -1 held without expiry, else ms left. */
export const PTTL = script(`return redis.call('PTTL', KEYS[1])`);

/** KEYS: lock, result. ARGV: token, attempt id ('' = any), payload, ttlMs. → 1 stored, 0 not ours. */
export const PUT_RESULT = script(
  MATCH +
    `
if not ours(redis.call('GET', KEYS[1]), ARGV[1], ARGV[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 1
`,
);

/** KEYS: result. → the stored payload or nil. */
export const GET_RESULT = script(`return redis.call('GET', KEYS[1])`);

/** ARGV: cursor, match pattern, count. → {next cursor, keys}. */
export const SCAN = script(`return redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])`);

/**
 * A script's 1 (granted, done): an integer reply, or its text from a client that gives integers
 * as strings (ioredis `stringNumbers`). Only the flag 1 counts: a refusal never reads as a grant.
 */
export const isOne = (v: unknown): boolean => v === 1 || v === '1';
/** A script's 0 flag (refused), as an integer or as text (see isOne). */
export const isZero = (v: unknown): boolean => v === 0 || v === '0';
