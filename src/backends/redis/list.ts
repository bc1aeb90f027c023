/**
 * Administration for `leasehold status` and `leasehold release --force`: listing held locks by
 * prefix (SCAN on each master: every node of a cluster) and breaking a lock whoever
 * holds it. Kept apart from the hot-path scripts; wired into RedisBackend by one line.
 */
import type { LockInfo } from '../../backend.js';
import { script, type RedisAdapter } from './client.js';
import { HEAD, SESSION } from './scripts.js';

/**
 * ARGV cursor pattern count keyPrefix → { next cursor, { key, fence, pttl, value|false }... }.
 * One SCAN step; lock keys are `<keyPrefix>{<full key>}` (the client's keyPrefix: SCAN sees the
 * keys as stored; the lock's other keys have a suffix after the brace). A lock whose session
 * lapsed is not held (not listed); its pttl is its session's.
 */
const LIST = script(
  SESSION +
    `
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local out = { r[1] }
for _, k in ipairs(r[2]) do
  if redis.call('TYPE', k).ok == 'string' and alive(redis.call('GET', k)) then
    out[#out + 1] = { string.sub(k, #ARGV[4] + 2, -2), redis.call('GET', k .. ':fence') or '0', left(k), redis.call('GET', k .. ':v') or false }
  end
end
return out
`,
);

/**
 * KEYS lock fence v q qx qv; ARGV changed claim fenceIdle → { fence, pttl, value|false } of what
 * was broken, or false. Tells watchers, and hands the lock to the queue's first live waiter as a
 * release does (a lock whose session lapsed is freed so, and reported as nothing held).
 */
const FORCE_RELEASE = script(
  HEAD +
    `
local cur = redis.call('GET', KEYS[1])
if not cur then return false end
local who = alive(cur)
local info = false
if who then
  info = { redis.call('GET', KEYS[2]) or '0', left(KEYS[1]), redis.call('GET', KEYS[3]) or false }
  local sep = string.find(cur, '|', 1, true)
  if sep then
    -- a lock that hangs off a session: its holder hears of it at the session's next renewal
    local s = string.sub(cur, sep + 1)
    redis.call('SADD', s .. ':lost', who)
    redis.call('PEXPIRE', s .. ':lost', math.max(redis.call('PTTL', s), 0) + 60000)
  end
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('PUBLISH', ARGV[1], 'r')
if redis.call('EXISTS', KEYS[4]) == 1 then
  hand_over(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[3], KEYS[6], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms())
end
return info
`,
);

/** Escapes Redis glob metacharacters. */
const glob = (s: string) => s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);

function info(key: string, fence: unknown, pttl: unknown, value: unknown): LockInfo {
  const out: LockInfo = { key, fence: BigInt(String(fence)), remainingMs: Number(pttl) };
  return value === null || value === undefined || value === false ? out : { ...out, value: String(value) };
}

export interface RedisKeysOf {
  (key: string): {
    lock: string;
    fence: string;
    value: string;
    q: string;
    qx: string;
    qv: string;
    changed: string;
  };
}

/** `list` and `forceRelease` for a Redis backend on `adapter`. */
export function redisAdmin(adapter: RedisAdapter, keysOf: RedisKeysOf, cfg: { claimMs: number; fenceIdleMs: number }) {
  return {
    async *list(prefix: string): AsyncIterable<LockInfo> {
      const seen = new Set<string>();
      // SCAN's pattern is not a key: no client prefixes it
      const kp = adapter.keyPrefix;
      const pattern = `${glob(kp)}{${glob(prefix)}*}`;
      for (const node of await adapter.masters()) {
        let cursor = '0';
        do {
          const [r] = await node.run([{ script: LIST, keys: [], args: [cursor, pattern, 500, kp] }]);
          if (r instanceof Error) throw r;
          const [next, ...rows] = r as [string, ...[string, string, number, string | false][]];
          cursor = String(next);
          for (const [key, fence, pttl, value] of rows) {
            if (seen.has(key)) continue; // SCAN may return a key twice (and a moving slot, on two nodes)
            seen.add(key);
            yield info(key, fence, pttl, value);
          }
        } while (cursor !== '0');
      }
    },
    async forceRelease(key: string): Promise<LockInfo | null> {
      const k = keysOf(key);
      const [r] = await adapter.run([
        {
          script: FORCE_RELEASE,
          keys: [k.lock, k.fence, k.value, k.q, k.qx, k.qv],
          args: [k.changed, cfg.claimMs, cfg.fenceIdleMs],
        },
      ]);
      if (r instanceof Error) throw r;
      if (!Array.isArray(r)) return null;
      const [fence, pttl, value] = r as [string, number, string | false];
      return info(key, fence, pttl, value);
    },
  };
}
