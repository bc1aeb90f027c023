/**
 * The single-node Redis scripts. Every key of one lock shares the hash tag `{<key>}`, so each
 * script touches one slot (Redis Cluster). Keys travel as KEYS, tokens and TTLs as ARGV.
 *
 *   {k}       the lock: token, PX ttl
 *   {k}:fence the fence counter: each grant's fence is max(counter + 1, the server's TIME in µs),
 *             so a counter lost in a restart without persistence comes back above every fence
 *             issued before (while the server's clock does not step back); it expires after
 *             max(fenceIdle, ttl) without a grant or renewal (docs/redis.md, "Fences")
 *   {k}:q     arrival queue of waiters (ZSET `<channel>|<token>` → arrival, the server's µs)
 *   {k}:qx    expiry of each waiter's place (ZSET member → expiry ms): `place` ms (a few seconds,
 *             whatever the lease TTL) after the waiter's last attempt; a waiting caller attempts
 *             again at least every place/3, so only a dead waiter's place lapses
 *   {k}:v     holder value (election), same PX as the lock
 *   {k}:qv    a waiter's value (HASH member → value), set on the holder's value at a hand-over
 *
 * Every grant publishes 'g' and every release 'r' on `{k}:changed` (for `watch`: observers of
 * an election). A release hands the lock to the head of the queue itself: the lock becomes the
 * head's with a short claim lease, the head leaves the queue, and one message on the head's
 * backend channel (`<sha1(token)><fence>|u<µs>|<lock>`) tells it: the waiter holds the lock from
 * then on, and its first renewal turns the claim into its full TTL (or, when the message may be
 * stale, its next acquire confirms it). An unconfirmed claim lapses by itself; the next waiter
 * takes over.
 */
import { script } from './client.js';

/**
 * Lua shared by the scripts that grant or hand the lock on. `mint` issues the next fence;
 * `live_head` drops waiters whose place expired (from the queue and the values' hash, in bulk, at
 * most 8000 per call) and returns the
 * first live one (or nil: none, or none found within that bound; never a head it did not check); `hand_over` gives a free lock to that waiter with a short claim lease and
 * tells it, on its backend's own channel, with one message (never its token).
 * A queue member is `<its backend's channel>|<token>`.
 */
const ALIVE = `
local function alive(cur)
  if not cur then return false end
  local sep = string.find(cur, '|', 1, true)
  if not sep then return cur end
  if redis.call('EXISTS', string.sub(cur, sep + 1)) == 1 then return string.sub(cur, 1, sep - 1) end
  return false
end
`;

const LEFT = `
-- ms left on the lock (its session's, for a lock that hangs off one); raw: its value when the
-- caller has just read it (false: read here)
local function left(lock, raw)
  local cur = raw or redis.call('GET', lock)
  local sep = cur and string.find(cur, '|', 1, true)
  if sep then return redis.call('PTTL', string.sub(cur, sep + 1)) end
  return redis.call('PTTL', lock)
end
`;

/** `alive` (the holder's token, false for a lock whose session lapsed) and `left` (its ms left). */
export const SESSION = ALIVE + LEFT;

/** `mint` alone: the fence of a grant (the fast path of ACQUIRE needs nothing else). */
const MINT = `
local function mint(fence, idle, us)
  local now, s = us, nil
  if now then
    s = string.format('%.0f', now)
  else
    -- seconds and zero-padded µs joined as strings: exact, and cheaper than formatting a number
    local t = redis.call('TIME')
    s = t[1] .. string.sub('00000', #t[2]) .. t[2]
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  -- one write for the common case (the counter is behind the clock): it becomes now, with its
  -- expiry, and the old value comes back in the same call
  local old = redis.call('SET', fence, s, 'PX', idle, 'GET')
  if not old or tonumber(old) < now then return s end
  -- the counter is ahead of the clock (a clock stepped back, a burst within one µs): count on
  redis.call('SET', fence, old, 'PX', idle)
  local c = redis.call('INCR', fence)
  if c < 9007199254740992 then return string.format('%.0f', c) end
  return redis.call('GET', fence) -- exact: Lua numbers are doubles
end
`;

/** The queue's helpers (after MINT, which `hand_over` uses; `reap` uses SESSION's `alive`). */
const QUEUE = `
-- the server's time in ms, and in µs (exact: below 2^53) for arrival scores
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function live_head(q, qx, qv, now)
  for _ = 1, 16 do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then return nil end
    local exp = tonumber(redis.call('ZSCORE', qx, head))
    if exp and exp > now then return head end
    -- the head is dead: it goes, and with it every lapsed place, in bulk (500 per round)
    local dead = redis.call('ZRANGEBYSCORE', qx, '-inf', string.format('%.0f', now), 'LIMIT', 0, 500)
    dead[#dead + 1] = head
    redis.call('ZREM', q, unpack(dead))
    redis.call('ZREM', qx, unpack(dead))
    redis.call('HDEL', qv, unpack(dead))
  end
  -- still no live head after 8000 dead waiters: none is known, never an unchecked one
  return nil
end
local function hand_over(lock, fence, q, qx, v, qv, changed, claim, idle, now, us)
  local head = live_head(q, qx, qv, now)
  if not head then return end
  local sep = string.find(head, '|', 1, true)
  if not sep then
    redis.call('ZREM', q, head)
    redis.call('ZREM', qx, head)
    return
  end
  local token = string.sub(head, sep + 1)
  redis.call('SET', lock, token, 'PX', claim)
  local val = redis.call('HGET', qv, head)
  if val then redis.call('SET', v, val, 'PX', claim) end
  local f = mint(fence, math.max(idle, claim), us)
  -- the head leaves the queue: it holds the lock now (a dead head's claim lapses by itself)
  redis.call('ZREM', q, head)
  redis.call('ZREM', qx, head)
  redis.call('HDEL', qv, head)
  redis.call('PUBLISH', changed, 'g')
  -- sha1(token) names the waiter without revealing its token; the fence and the time of the
  -- hand-over (the server's µs, marked u) let it take the lock without a round trip
  -- (docs/redis.md, "Hand-over")
  redis.call('PUBLISH', string.sub(head, 1, sep - 1), redis.sha1hex(token) .. f .. '|u' .. string.format('%.0f', us) .. '|' .. lock)
end
-- reads the holder; a lock whose session lapsed is free: deleted and announced as a release.
-- Returns the live holder's token (or false), whether a lapsed lock was deleted, and the lock's
-- value as read (false when free or reaped).
local function reap(lock, v, changed)
  local raw = redis.call('GET', lock)
  local cur = alive(raw)
  if raw and not cur then
    redis.call('DEL', lock, v)
    redis.call('PUBLISH', changed, 'r')
    return false, true, false
  end
  return cur, false, raw
end
`;

/**
 * Every helper. A script defines its helpers (a closure each) at every call, before the code that
 * uses them runs: ACQUIRE and RELEASE define the queue's only past their fast paths (~0.3 µs of
 * Redis time per call saved each, measured).
 */
export const HEAD = SESSION + MINT + QUEUE;

/**
 * KEYS lock fence [session] | lock fence q qx v qv (Redis Cluster); ARGV token ttl fenceIdle
 * value(''=none) member(''=do not queue) place claim [changed] [lockPx create(0|1)] → fence as a
 * string (granted) | -pttl of the holder (0 if unknown): refused | { -pttl, server µs }: refused
 * and queued | 'gone': the session (KEYS[3]) lapsed, nothing was done. On a single server the
 * lock's other keys (`:q`, `:qx`, `:v`, `:qv`) are named from KEYS[1] here, in its slot: every
 * argument costs the server and the client on each call (~0.13 µs per argument in Redis alone),
 * and this is the hottest call. On a Cluster every key the script may touch is declared: while
 * a slot is migrating, a node runs a script only if it has all of its declared keys, and refuses
 * it with TRYAGAIN (or sends it on with ASK) before it runs otherwise, so nothing is written on a
 * half view of the lock (no fence minted without the counter, from another node's clock; no
 * grant past a queue that moved) and the caller may simply send it again (docs/redis.md,
 * "Resharding"). An undeclared key the node lacks would stop the script part-way instead ("non
 * local key"). The `changed` channel stays an argument: a client's keyPrefix goes on KEYS, never
 * on channels: without a keyPrefix the channel is `<lock>:changed` and left out (one argument
 * less; a session's call still sends it, before its own two). `create`
 * makes a missing session key: only the session's one creating acquire sends it (index.ts).
 * With a session the lock is `<token>|<session key>` with the long PX lockPx (a bound on how
 * long the key of a dead session lingers), and the attempt sets the session's expiry to ttl; a
 * lock whose session lapsed is free (reaped: deleted, announced as a release).
 * Fast path: no queue and a free lock is SET NX + the fence (EXISTS, SET NX, TIME, SET … GET,
 * PUBLISH: five commands; the holder is read only when SET NX fails). A lock handed to this
 * token by a release (a claim) is confirmed with the caller's ttl. Otherwise only the head of the arrival
 * queue may take a free lock (a free lock whose turn is another waiter's is handed to it); a
 * refused caller with a member joins (or refreshes its place in) the queue, its place expiring
 * after `place` ms (not the TTL: a dead waiter blocks nobody for long).
 */
export const ACQUIRE = script(
  MINT +
    `
local L = KEYS[1]
local free
-- the fast path, without a session (2 keys; 6 on a Cluster): nobody queued and the lock free is
-- SET NX + the fence, nothing read before, nothing computed that it does not use
if #KEYS ~= 3 then
  free = redis.call('EXISTS', KEYS[3] or L .. ':q') == 0
  if free and redis.call('SET', L, ARGV[1], 'NX', 'PX', ARGV[2]) then
    if ARGV[4] ~= '' then redis.call('SET', KEYS[5] or L .. ':v', ARGV[4], 'PX', ARGV[2]) end
    -- max(fenceIdle, ttl), as the argument's own string (no number to convert back)
    local idle = ARGV[3]
    if tonumber(idle) < tonumber(ARGV[2]) then idle = ARGV[2] end
    local f = mint(KEYS[2], idle)
    redis.call('PUBLISH', ARGV[8] or L .. ':changed', 'g')
    return f
  end
end
local ttl = tonumber(ARGV[2])
local px, val, S, Q, V = ttl, ARGV[1], KEYS[3], L .. ':q', L .. ':v'
-- a Cluster declares every key (lock fence q qx v qv); it has no session
if KEYS[4] then S, Q, V = nil, KEYS[3], KEYS[5] end
if S then
  if redis.call('PEXPIRE', S, ttl) == 0 then
    if ARGV[10] ~= '1' then return 'gone' end
    redis.call('SET', S, '1', 'PX', ttl)
  end
  px = tonumber(ARGV[9])
  val = ARGV[1] .. '|' .. S
end
local idle = math.max(tonumber(ARGV[3]), px)
local F, changed = KEYS[2], ARGV[8] or L .. ':changed'
local member, queue = ARGV[5], ARGV[5] ~= ''
local function grant(us)
  if ARGV[4] ~= '' then redis.call('SET', V, ARGV[4], 'PX', px) end
  local f = mint(F, idle, us)
  redis.call('PUBLISH', changed, 'g')
  return f
end
if free == nil then
  -- a session's lock: its own fast path, past the session's expiry
  free = redis.call('EXISTS', Q) == 0
  if free and redis.call('SET', L, val, 'NX', 'PX', px) then return grant() end
end
` +
    SESSION +
    QUEUE +
    `
local QX, QV = KEYS[4] or L .. ':qx', KEYS[6] or L .. ':qv'
local function unqueue()
  redis.call('ZREM', Q, member)
  redis.call('ZREM', QX, member)
  redis.call('HDEL', QV, member)
end
local cur, reaped, raw = reap(L, V, changed)
-- the holder's value as read, while it stands (below, a free lock may be handed over: read again)
local held = cur and raw
if reaped and free then
  redis.call('SET', L, val, 'PX', px)
  return grant()
end
if free and not queue then return -math.max(left(L, held), 0) end
if cur == ARGV[1] then
  redis.call('SET', L, val, 'PX', px)
  if ARGV[4] ~= '' then redis.call('SET', V, ARGV[4], 'PX', px) end
  if queue then unqueue() end
  local f = redis.call('GET', F)
  if not f then return mint(F, idle) end
  redis.call('PEXPIRE', F, idle)
  return f
end
local now, arrival = now_ms()
if not cur then
  local head = live_head(Q, QX, QV, now)
  if (not head) or head == member then
    redis.call('SET', L, val, 'PX', px)
    if head then unqueue() end
    return grant(arrival)
  end
  hand_over(L, F, Q, QX, V, QV, changed, tonumber(ARGV[7]), tonumber(ARGV[3]), now, arrival)
  held = false
end
if queue then
  local place = tonumber(ARGV[6])
  -- arrival in µs: waiters refused within one ms keep the order the server refused them in
  redis.call('ZADD', Q, 'NX', string.format('%.0f', arrival), member)
  redis.call('ZADD', QX, now + place, member)
  -- the queue's keys outlive every place in them: 2 × place from a refresh, refreshed only once
  -- fewer than place ms are left (not at every refusal: three writes saved on most of them). The
  -- values' hash can be new while the queue is not: it gets its expiry at once.
  local fresh = ARGV[4] ~= '' and redis.call('HSET', QV, member, ARGV[4]) == 1 and redis.call('PTTL', QV) < 0
  if fresh or redis.call('PTTL', Q) < place then
    redis.call('PEXPIRE', Q, 2 * place)
    redis.call('PEXPIRE', QX, 2 * place)
    redis.call('PEXPIRE', QV, 2 * place)
  end
  return { -math.max(left(L, held), 0), arrival }
end
return -math.max(left(L, held), 0)
`,
);

/**
 * KEYS lock1 lock2 … | lock1 v1 fence1 lock2 … (Redis Cluster: declared, as ACQUIRE says why);
 * ARGV ttl fenceTtl token1 token2 … → { 1 | 0, … }. Token-checked PEXPIRE of many leases of one
 * TTL in one call: each lock and its value (`<lock>:v`) get the ttl, its fence counter
 * (`<lock>:fence`, in the lock's slot) lives at least fenceTtl. Two strings per lease on the wire
 * on a single server, whatever the number of leases: the renewal's cost is per lease, so it is
 * kept small. A lock that hangs off a live session leaves it: it gets its own expiry (a lease
 * extended by itself). On a Cluster, all KEYS of one call share a slot (the caller groups them).
 */
export const EXTEND_MANY = script(
  SESSION +
    `
local ttl, fttl = ARGV[1], ARGV[2]
-- 1 key per lease, or 3 (lock v fence: a Cluster declares them)
local step = #KEYS / (#ARGV - 2)
local out = {}
for i = 1, #ARGV - 2 do
  local at = (i - 1) * step + 1
  local k, t = KEYS[at], ARGV[i + 2]
  local cur = redis.call('GET', k)
  if cur and alive(cur) == t then
    if cur ~= t then redis.call('SET', k, t, 'PX', ttl) -- leaves its session
    else redis.call('PEXPIRE', k, ttl) end
    if step == 3 then
      redis.call('PEXPIRE', KEYS[at + 1], ttl)
      redis.call('PEXPIRE', KEYS[at + 2], fttl)
    else
      redis.call('PEXPIRE', k .. ':v', ttl)
      redis.call('PEXPIRE', k .. ':fence', fttl)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`,
);

/**
 * KEYS lock fence | lock fence q qx v qv (Redis Cluster); ARGV token claim fenceIdle [changed] →
 * 1 | 0. Token-checked delete (of the lock and its `:v`); tells watchers on `changed`; hands the
 * lock to the queue's first live waiter (one message). `changed` is left out by a client with no
 * keyPrefix: it is then `<lock>:changed`. On a single server the other keys are
 * named from KEYS[1], in its slot (as in ACQUIRE, which also says why a Cluster declares them
 * all, and why the fence counter is always declared: a hand-over mints a fence).
 */
export const RELEASE = script(
  ALIVE +
    `
local L = KEYS[1]
local cur = redis.call('GET', L)
local who = cur
-- the caller's own lock as it stored it (no session: nothing to split) is the common case
if cur ~= ARGV[1] or string.find(cur, '|', 1, true) then
  who = alive(cur)
  if who ~= ARGV[1] and not (cur and not who) then return 0 end
  -- its session lapsed: the lock is free, and goes on as at a release (the caller's was not it)
end
local V, Q, changed = KEYS[5] or L .. ':v', KEYS[3] or L .. ':q', ARGV[4] or L .. ':changed'
redis.call('DEL', L, V)
redis.call('PUBLISH', changed, 'r')
if redis.call('EXISTS', Q) == 1 then
` +
    MINT +
    QUEUE +
    `
  hand_over(L, KEYS[2], Q, KEYS[4] or L .. ':qx', V, KEYS[6] or L .. ':qv', changed, tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms())
end
if who ~= ARGV[1] then return 0 end
return 1
`,
);

/**
 * KEYS q qx lock v fence qv; ARGV member token changed claim fenceIdle. A waiter gives up its
 * place (and a claim handed to it that it never confirmed); a free lock goes to the next waiter.
 */
export const LEAVE = script(
  HEAD +
    `
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
if reap(KEYS[3], KEYS[4], ARGV[3]) == ARGV[2] then
  redis.call('DEL', KEYS[3], KEYS[4])
  redis.call('PUBLISH', ARGV[3], 'r')
end
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  hand_over(KEYS[3], KEYS[5], KEYS[1], KEYS[2], KEYS[4], KEYS[6], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), now_ms())
end
return 0
`,
);

/** KEYS lock fence v → { fence, pttl, value } or false (pttl: the session's, for a lock that hangs off one) */
export const INSPECT = script(
  SESSION +
    `
if not alive(redis.call('GET', KEYS[1])) then return false end
return { redis.call('GET', KEYS[2]) or '0', left(KEYS[1]), redis.call('GET', KEYS[3]) or false }
`,
);

/** KEYS lock result; ARGV token value ttl → 1 if stored (the lock is still this token's) | 0 */
export const PUT_RESULT = script(
  SESSION +
    `
if alive(redis.call('GET', KEYS[1])) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
`,
);

export { REFRESH_MANY, RENEW_SESSION } from './session-scripts.js';

/** KEYS result → the stored result or nil (a script, so both clients read it the same way) */
export const GET_RESULT = script(`return redis.call('GET', KEYS[1])`);
