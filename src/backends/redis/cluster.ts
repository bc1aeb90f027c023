/**
 * Renewal on Redis Cluster, one round trip per master per tick.
 *
 * Fast path (Redis ≥ 7): the leases are grouped by the master that serves their slot, and each
 * master gets one pipeline of EXTEND_NODE calls (256 leases each) on its own connection. The
 * script carries the `allow-cross-slot-keys` flag and takes its keys as ARGV, because EVAL's
 * declared keys must share one slot (no client prefixes ARGV: the client's keyPrefix is put on
 * them here); the server still refuses any key this node does not serve (a slot that moved or
 * is migrating): that chunk then takes the slow path.
 *
 * Slow path (Redis 6, or after a refusal): one EXTEND_MANY call per slot, every key it touches
 * declared (a migrating slot then answers TRYAGAIN before the script runs); the adapter sends one
 * pipeline per slot owner, follows MOVED/ASK and sends a TRYAGAIN again (TryAgainAdapter).
 *
 * `renewalCalls` and `spreadFlags` build and read the EXTEND_MANY calls of a single server's
 * renewal too (there, one pipeline for all of them).
 */
import { inspect } from 'node:util';
import type { ExtendItem } from '../../backend.js';
import { now, sleep } from '../../wait.js';
import { hidden, script, type MessageListener, type RedisAdapter, type Script, type ScriptCall } from './client.js';
import { slotOf } from './slots.js';

/**
 * How long a call that a migrating slot refused with TRYAGAIN is sent again (from when it was
 * first sent; ioredis's own retries count). The scripts declare every key they touch on a
 * Cluster, so a TRYAGAIN came before the script ran: sending it again is safe. A reshard moves a
 * slot's keys in a few round trips, so this is usually over in milliseconds; the engine's
 * opTimeout bounds the call in any case.
 */
export const TRYAGAIN_MS = 2000;

/**
 * Refused before it ran: TRYAGAIN, or ioredis giving up after redirections whose last answer was
 * a redirection or a refusal (not a closed connection: a call may have run before that).
 */
const isTryAgain = (r: unknown): boolean =>
  r instanceof Error &&
  /^(redis: )?(TRYAGAIN|Too many Cluster redirections\. Last error: (ReplyError: )?(MOVED|ASK|TRYAGAIN) )/.test(
    r.message,
  );

/**
 * A Cluster adapter whose calls refused with TRYAGAIN (a slot migrating, and not all of a
 * script's keys on one node yet) are sent again, backing off from 10 to 100 ms, for up to
 * TRYAGAIN_MS. node-redis does not retry TRYAGAIN; ioredis does (16 redirections, 100 ms apart
 * for a TRYAGAIN, then "Too many Cluster redirections", retried here too when its last answer
 * was a redirection or a refusal).
 */
export class TryAgainAdapter implements RedisAdapter {
  readonly kind: RedisAdapter['kind'];
  readonly keyPrefix: string;
  readonly unprefixed?: boolean;
  readonly cluster = true;
  readonly nodeFor?: RedisAdapter['nodeFor'];
  constructor(private readonly inner: RedisAdapter) {
    this.kind = inner.kind;
    this.keyPrefix = inner.keyPrefix;
    this.unprefixed = inner.unprefixed;
    if (inner.nodeFor) this.nodeFor = (slot) => inner.nodeFor!(slot);
  }
  async run(calls: readonly ScriptCall[]): Promise<unknown[]> {
    const until = now() + TRYAGAIN_MS;
    const res = await this.inner.run(calls);
    if (!res.some(isTryAgain)) return res;
    for (let delay = 10; now() < until; delay = Math.min(delay * 2, 100)) {
      await sleep(delay);
      const idx: number[] = [];
      res.forEach((r, i) => isTryAgain(r) && idx.push(i));
      const again = await this.inner.run(idx.map((i) => calls[i]!));
      idx.forEach((i, n) => (res[i] = again[n]));
      if (!res.some(isTryAgain)) break;
    }
    return res;
  }
  masters(): Promise<RedisAdapter[]> {
    return this.inner.masters();
  }
  subscribe(channel: string, listener: MessageListener): Promise<void> {
    return this.inner.subscribe(channel, listener);
  }
  unsubscribe(channel: string): Promise<void> {
    return this.inner.unsubscribe(channel);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
  [inspect.custom](): string {
    return hidden(this.kind);
  }
  toJSON(): { kind: string } {
    return { kind: this.kind };
  }
}

/**
 * ARGV lock1 token1 ttl1 fenceTtl1 lock2 … → { 1 | 0, … } (keys of any slot this node serves);
 * as EXTEND_MANY: the lock and its value get the ttl, the fence counter lives at least fenceTtl.
 */
export const EXTEND_NODE = script(`#!lua flags=allow-cross-slot-keys
local out = {}
for i = 1, #ARGV, 4 do
  local k = ARGV[i]
  if redis.call('GET', k) == ARGV[i + 1] then
    redis.call('PEXPIRE', k, ARGV[i + 2])
    redis.call('PEXPIRE', k .. ':v', ARGV[i + 2])
    redis.call('PEXPIRE', k .. ':fence', ARGV[i + 3])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`);

/**
 * EXTEND_MANY calls for the items at `idx` (all in one slot on a Cluster): one call per TTL per
 * `chunk` leases (the TTLs travel once per call); `order[c]` lists call c's item indices.
 */
export function renewalCalls(
  items: readonly ExtendItem[],
  idx: readonly number[],
  extendMany: Script,
  chunk: number,
  fenceTtl: (ttlMs: number) => number,
  declare = false,
): { calls: ScriptCall[]; order: number[][] } {
  const byTtl = new Map<number, number[]>();
  for (const i of idx) {
    const ttl = items[i]!.ttlMs;
    const g = byTtl.get(ttl);
    if (g) g.push(i);
    else byTtl.set(ttl, [i]);
  }
  const calls: ScriptCall[] = [];
  const order: number[][] = [];
  for (const [ttl, group] of byTtl) {
    for (let i = 0; i < group.length; i += chunk) {
      const part = group.slice(i, i + chunk);
      const keys: string[] = new Array(declare ? 3 * part.length : part.length);
      const args: (string | number)[] = new Array(part.length + 2);
      args[0] = ttl;
      args[1] = fenceTtl(ttl);
      for (let n = 0; n < part.length; n++) {
        const it = items[part[n]!]!;
        const k = `{${it.key}}`;
        if (declare) {
          keys[3 * n] = k;
          keys[3 * n + 1] = `${k}:v`;
          keys[3 * n + 2] = `${k}:fence`;
        } else keys[n] = k;
        args[n + 2] = it.token;
      }
      calls.push({ script: extendMany, keys, args });
      order.push(part);
    }
  }
  return { calls, order };
}

/**
 * Writes the replies of `renewalCalls`' calls into `out`, item by item; a failed call throws, or
 * with `perItem` leaves its Error in each of its items' places.
 */
export function spreadFlags(
  res: readonly unknown[],
  order: readonly number[][],
  out: (boolean | Error)[],
  perItem = false,
): void {
  res.forEach((r, c) => {
    if (r instanceof Error) {
      if (!perItem) throw r;
      for (const j of order[c]!) out[j] = r;
      return;
    }
    const flags = r as unknown[];
    order[c]!.forEach((j, n) => (out[j] = Number(flags[n]) === 1));
  });
}

/** Adapters whose server refused the flagged script (Redis < 7): slow path from then on. */
const noFastPath = new WeakSet<RedisAdapter>();

/**
 * Token-checked PEXPIRE of `items` on a cluster; one flag per item, in order. A slot that still
 * refuses after TRYAGAIN_MS (stuck mid-migration) fails its own items only: each gets the Error
 * (Backend.extend), and the call rejects only when no item went through.
 */
export async function clusterExtend(
  adapter: RedisAdapter,
  items: readonly ExtendItem[],
  extendMany: Script,
  chunk: number,
  fenceTtl: (ttlMs: number) => number,
): Promise<(boolean | Error)[]> {
  const out: (boolean | Error)[] = new Array(items.length);
  let slow: number[] = [];
  if (adapter.nodeFor && !noFastPath.has(adapter)) {
    const byNode = new Map<string, { node: RedisAdapter; idx: number[] }>();
    for (let i = 0; i < items.length; i++) {
      const at = await adapter.nodeFor(slotOf(`{${items[i]!.key}}`));
      if (!at) {
        slow.push(i);
        continue;
      }
      const g = byNode.get(at.id);
      if (g) g.idx.push(i);
      else byNode.set(at.id, { node: at.adapter, idx: [i] });
    }
    await Promise.all(
      [...byNode.values()].map(async ({ node, idx }) => {
        const parts: number[][] = [];
        for (let i = 0; i < idx.length; i += chunk) parts.push(idx.slice(i, i + chunk));
        // the keys travel as ARGV, which no client prefixes: the client's keyPrefix goes on here
        const calls = parts.map((part) => ({
          script: EXTEND_NODE,
          keys: [],
          args: part.flatMap((j) => [
            `${adapter.keyPrefix}{${items[j]!.key}}`,
            items[j]!.token,
            items[j]!.ttlMs,
            fenceTtl(items[j]!.ttlMs),
          ]),
        }));
        const res = await node.run(calls).catch((e: Error) => calls.map(() => e));
        res.forEach((r, c) => {
          if (r instanceof Error || !Array.isArray(r)) {
            if (r instanceof Error && /flags|shebang|compil/i.test(r.message)) noFastPath.add(adapter);
            slow.push(...parts[c]!);
          } else parts[c]!.forEach((j, n) => (out[j] = Number(r[n]) === 1));
        });
      }),
    );
  } else slow = items.map((_, i) => i);
  if (slow.length === 0) return out;

  const bySlot = new Map<number, number[]>();
  for (const i of slow) {
    const slot = slotOf(`{${items[i]!.key}}`);
    const g = bySlot.get(slot);
    if (g) g.push(i);
    else bySlot.set(slot, [i]);
  }
  const calls: ScriptCall[] = [];
  const order: number[][] = [];
  for (const idx of bySlot.values()) {
    const r = renewalCalls(items, idx, extendMany, chunk, fenceTtl, true);
    calls.push(...r.calls);
    order.push(...r.order);
  }
  spreadFlags(await adapter.run(calls), order, out, true);
  const failed = out.find((r): r is Error => r instanceof Error);
  if (failed && out.every((r) => r instanceof Error)) throw failed;
  return out;
}
