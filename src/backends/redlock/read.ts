/**
 * Reads across the quorum: inspect (one key or many), list, and the result store.
 *
 * A key is held when a majority of nodes hold the same token. Its fence is the value a majority
 * of those nodes agree on — each node's pin if it has one, else its counter (see acquire.ts): a
 * completed grant leaves its fence on a majority. Just after a grant, the holder's nodes may
 * still disagree (a write-back or a pin on its way, about one round trip): a read that sees them
 * disagree reads again, briefly, until they agree; a read always waits for every node that is
 * not suspect, so it never decides on a majority that is about to change.
 */
import type { LockInfo, ResultStore } from '../../backend.js';
import { BackendError, InvalidArgumentError, QuorumError } from '../../errors.js';
import type { Ctx } from './acquire.js';
import { causesOf, isHardFailure, type Outcome, round, tally } from './quorum.js';
import {
  fenceKey,
  GET_RESULT,
  INSPECT,
  isOne,
  lockKey,
  pinKey,
  PUT_RESULT,
  resultKey,
  SCAN,
  valueKey,
} from './scripts.js';

type Entry = { holder: string; pttl: number; fence: bigint; value: string | null } | null;

/** How long a read keeps re-reading holder nodes that do not agree on the fence yet. */
const SETTLE_MS = 100;

function parseEntry(r: unknown): Entry {
  if (!Array.isArray(r)) throw new BackendError(`redlock: unexpected inspect reply ${String(r)}`);
  if (!isOne(r[0])) return null;
  const value = r[4] === null || r[4] === undefined || r[4] === false ? null : String(r[4]);
  return { holder: String(r[1]), pttl: Number(r[2]), fence: BigInt(String(r[3])), value };
}

/** The largest set of answers that hold the lock for one token. */
function holders(entries: readonly Entry[]): NonNullable<Entry>[] {
  const by = new Map<string, NonNullable<Entry>[]>();
  for (const e of entries) if (e) by.set(e.holder, [...(by.get(e.holder) ?? []), e]);
  return [...by.values()].sort((a, b) => b.length - a.length)[0] ?? [];
}

function quorumLost(ctx: Ctx, outs: readonly (Outcome<unknown> | undefined)[], what: string): QuorumError | null {
  const n = ctx.nodes.length;
  const causes = causesOf(outs, n);
  const failed = causes.filter((c) => c !== null && isHardFailure(c)).length;
  if (failed <= n - ctx.quorum) return null;
  return new QuorumError(`redlock: ${what}: ${failed} of ${n} nodes failed`, causes);
}

interface View {
  readonly info: LockInfo | null;
  /** Every holder node agrees on the fence (or nobody holds the key). */
  readonly settled: boolean;
}

function view(ctx: Ctx, key: string, entries: readonly Entry[]): View {
  const q = ctx.quorum;
  const held = holders(entries);
  if (held.length < q) return { info: null, settled: true };
  const counts = new Map<bigint, number>();
  for (const e of held) counts.set(e.fence, (counts.get(e.fence) ?? 0) + 1);
  const settled = counts.size === 1;
  let fence: bigint | null = null;
  for (const [f, c] of counts) if (c >= q && (fence === null || f > fence)) fence = f;
  if (fence === null) return { info: null, settled };
  // The lock stays held by a majority for at least the q-th longest remaining time.
  const remainingMs = held.map((e) => e.pttl).sort((a, b) => b - a)[q - 1]!;
  const value = held.find((e) => e.value !== null)?.value;
  const info: LockInfo = { key, fence, remainingMs };
  return { info: value === undefined || value === null ? info : { ...info, value }, settled };
}

/** One read of many keys: one pipelined round per node (one script per key). */
async function readOnce(ctx: Ctx, keys: readonly string[]): Promise<View[]> {
  const q = ctx.quorum;
  const calls = keys.map((k) => ({
    script: INSPECT,
    keys: [lockKey(k), fenceKey(k), valueKey(k), pinKey(k)],
    args: [],
  }));
  const perKey = (outs: readonly (Outcome<Entry[]> | undefined)[], j: number): Entry[] =>
    outs.map((o) => (o?.ok ? (o.value[j] ?? null) : null));
  const r = await round(
    ctx.all,
    async (i) => {
      const res = await ctx.nodes[i]!.adapter.run(calls);
      if (res.length !== calls.length) throw new BackendError('redlock: pipeline answered the wrong count');
      return res.map((x) => {
        if (x instanceof Error) throw x;
        return parseEntry(x);
      });
    },
    ctx.cfg.nodeTimeoutMs,
    // every answer that can still come, except where no majority can hold the key any more
    (outs, pending) =>
      pending === 0 || keys.every((_, j) => holders(perKey(outs, j)).length + pending < q) ? true : undefined,
    ctx.label,
    ctx.health,
  );
  const lost = quorumLost(ctx, r.outcomes, keys.length === 1 ? `inspect "${keys[0]}"` : 'inspect');
  if (lost) throw lost;
  return keys.map((key, j) => view(ctx, key, perKey(r.outcomes, j)));
}

/** Inspects many keys; keys whose holder nodes do not agree yet are read again (bounded). */
export async function inspectMany(ctx: Ctx, keys: readonly string[]): Promise<(LockInfo | null)[]> {
  const out: (LockInfo | null)[] = keys.map(() => null);
  const until = performance.now() + SETTLE_MS;
  let todo = keys.map((_, j) => j);
  for (;;) {
    const views = await readOnce(
      ctx,
      todo.map((j) => keys[j]!),
    );
    const again: number[] = [];
    views.forEach((v, x) => {
      out[todo[x]!] = v.info;
      if (!v.settled) again.push(todo[x]!);
    });
    if (again.length === 0 || performance.now() >= until) return out;
    todo = again;
    await new Promise((r) => setTimeout(r, 2));
  }
}

const globEscape = (s: string) => s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
const BATCH = 200;

/** Every lock key under `prefix` on any node (a held lock is on a majority, so on some answering node). */
async function scanKeys(ctx: Ctx, prefix: string): Promise<string[]> {
  const match = `{${globEscape(prefix)}*}`;
  const found = new Set<string>();
  const scanned = await Promise.all(
    ctx.all.map(async (i) => {
      try {
        let cursor = '0';
        do {
          const [next, keys] = (await ctx.one(i, { script: SCAN, keys: [], args: [cursor, match, BATCH] })) as [
            string,
            string[],
          ];
          // `{…}` exactly: the lock keys (the others end in :fence, :v, :result)
          for (const k of keys) if (k.startsWith('{') && k.endsWith('}')) found.add(k.slice(1, -1));
          cursor = String(next);
        } while (cursor !== '0');
        return null;
      } catch (e) {
        return e instanceof Error ? e : new BackendError(String(e));
      }
    }),
  );
  const failed = scanned.filter((e) => e !== null).length;
  // A lock held on a majority shows on all but n − q of the nodes: scanning n − q + 1 finds it.
  if (failed > ctx.quorum - 1) {
    throw new QuorumError(`redlock: list: ${failed} of ${ctx.nodes.length} nodes failed`, scanned);
  }
  return [...found].filter((k) => k.startsWith(prefix)).sort();
}

export async function* list(ctx: Ctx, prefix: string): AsyncIterable<LockInfo> {
  const keys = await scanKeys(ctx, prefix);
  for (let i = 0; i < keys.length; i += BATCH) {
    for (const info of await inspectMany(ctx, keys.slice(i, i + BATCH))) if (info) yield info;
  }
}

/**
 * Results on a majority, token-checked like the lock (only the holder's copies accept a write).
 * Each result carries the fence of the lease that wrote it: a read takes the highest it finds
 * among a majority of nodes, which always includes a node of any result that was stored on a
 * majority (a partial write by a holder that lost its lease can only be older).
 */
export function resultStore(ctx: Ctx): ResultStore {
  const q = ctx.quorum;
  return {
    async get(lockKey_: string) {
      const r = await round(
        ctx.all,
        async (i) => {
          const v = await ctx.one(i, { script: GET_RESULT, keys: [resultKey(lockKey_)], args: [] });
          return v === null || v === undefined || v === false ? null : String(v);
        },
        ctx.cfg.nodeTimeoutMs,
        (outs, pending) => {
          const answered = tally(outs, () => true).yes;
          return answered >= q || pending === 0 ? true : undefined;
        },
        ctx.label,
        ctx.health,
      );
      const lost = quorumLost(ctx, r.outcomes, `result of "${lockKey_}"`);
      if (lost) throw lost;
      let best: { fence: bigint; value: string } | null = null;
      for (const o of r.outcomes) {
        if (!o?.ok || o.value === null) continue;
        const cut = o.value.indexOf(':');
        if (cut < 1 || !/^\d+$/.test(o.value.slice(0, cut))) continue;
        const fence = BigInt(o.value.slice(0, cut));
        if (!best || fence > best.fence) best = { fence, value: o.value.slice(cut + 1) };
      }
      return best?.value ?? null;
    },

    async put(lockKey_: string, token: string, value: string, ttlMs: number) {
      if (typeof token !== 'string' || token.length === 0 || typeof value !== 'string') {
        throw new InvalidArgumentError('redlock results.put: token and value must be strings');
      }
      if (!Number.isInteger(ttlMs) || ttlMs < 1) {
        throw new InvalidArgumentError(`redlock results.put: ttlMs must be an integer ≥ 1, got ${String(ttlMs)}`);
      }
      const grant = ctx.grants.get(lockKey_, token);
      const args = [token, grant?.id ?? '', `${grant?.fence ?? 0n}:${value}`, ttlMs];
      const r = await round(
        ctx.all,
        (i) => ctx.one(i, { script: PUT_RESULT, keys: [lockKey(lockKey_), resultKey(lockKey_)], args }),
        ctx.cfg.nodeTimeoutMs,
        (outs, pending) => {
          const t = tally(outs, isOne);
          if (t.yes >= q) return true;
          if (t.yes + pending < q) return false;
          return undefined;
        },
        ctx.label,
        ctx.health,
      );
      if (r.decision) return true;
      const lost = quorumLost(ctx, r.outcomes, `storing the result of "${lockKey_}"`);
      if (lost) throw lost;
      return false;
    },
  };
}
