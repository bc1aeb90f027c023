/**
 * Re-seeding the fence counters of a node that restarted empty, before it rejoins (see
 * docs/redlock.md, "A node restarted empty"). Without it, a grant decided by a majority that
 * includes the empty node can read a counter lower than an earlier holder's fence.
 */
import { type Duration, toMs } from '../../duration.js';
import { BackendError, InvalidArgumentError } from '../../errors.js';
import { adapt } from '../redis/adapt.js';
import { script } from '../redis/client.js';
import { isOne } from './scripts.js';

/** ARGV: cursor, match, count → {cursor, keys, values} (value '' for a key that is not a string). */
const SCAN_FENCES = script(`
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local v = {}
for j, k in ipairs(r[2]) do
  local g = redis.pcall('GET', k)
  if type(g) == 'string' then v[j] = g else v[j] = '' end
end
return {r[1], r[2], v}
`);

/** KEYS: fence. ARGV: value, idle ms. Raises the counter to `value`, never lowers it. */
const RAISE = script(`
local cur = redis.call('GET', KEYS[1])
if (not cur) or #cur < #ARGV[1] or (#cur == #ARGV[1] and cur < ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`);

const globEscape = (s: string) => s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);

export interface ReseedOptions {
  /** Only counters of keys under this `createLocks` prefix (default: every leasehold fence). */
  readonly prefix?: string;
  /** Keys per SCAN step and per pipelined write (default 500). */
  readonly batch?: number;
  /** Expiry of a raised counter, as the backend's `fenceIdle` (default 24h). */
  readonly fenceIdle?: Duration;
}

/**
 * Raises every fence counter on `target` to the highest value found on `sources` (ioredis or
 * node-redis clients). Give it at least N − q + 1 of the other nodes (3 nodes: both others;
 * 5 nodes: three of the other four), so that every majority that stored a fence is represented.
 * Every source must answer, or it throws. Resolves with the number of counters it raised.
 * Run it while the target still refuses lock traffic (e.g. a temporary `requirepass`).
 */
export async function reseedFences(target: unknown, sources: readonly unknown[], opts: ReseedOptions = {}) {
  const to = adapt(target, 'reseedFences: target');
  if (!Array.isArray(sources) || sources.length === 0) {
    throw new InvalidArgumentError('reseedFences: sources must be a non-empty array of clients');
  }
  const from = sources.map((s, i) => adapt(s, `reseedFences: sources[${i}]`));
  const batch = opts.batch ?? 500;
  if (!Number.isInteger(batch) || batch < 1)
    throw new InvalidArgumentError('reseedFences: batch must be an integer ≥ 1');
  if (opts.prefix !== undefined && typeof opts.prefix !== 'string') {
    throw new InvalidArgumentError('reseedFences: prefix must be a string');
  }
  const idleMs = toMs(opts.fenceIdle ?? '24h', 'reseedFences: fenceIdle');
  const match = opts.prefix === undefined ? '{*}:fence' : `{${globEscape(opts.prefix)}:*}:fence`;
  const highest = new Map<string, bigint>();
  for (const a of from) {
    let cursor = '0';
    do {
      const [r] = await a.run([{ script: SCAN_FENCES, keys: [], args: [cursor, match, batch] }]);
      if (r instanceof Error) throw new BackendError(`reseedFences: a source failed: ${r.message}`, { cause: r });
      const [next, keys, values] = r as [string, string[], string[]];
      keys.forEach((k, j) => {
        const v = values[j];
        if (v === undefined || !/^\d+$/.test(v)) return;
        const n = BigInt(v);
        if (n > (highest.get(k) ?? -1n)) highest.set(k, n);
      });
      cursor = String(next);
    } while (cursor !== '0');
  }
  let raised = 0;
  const entries = [...highest];
  for (let i = 0; i < entries.length; i += batch) {
    const calls = entries
      .slice(i, i + batch)
      .map(([k, v]) => ({ script: RAISE, keys: [k], args: [v.toString(), idleMs] }));
    const res = await to.run(calls);
    for (const r of res) {
      if (r instanceof Error) throw new BackendError(`reseedFences: the target failed: ${r.message}`, { cause: r });
      if (isOne(r)) raised++;
    }
  }
  return { raised };
}
