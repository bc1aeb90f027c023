/**
 * A thin adapter over the two Redis clients users have: ioredis and node-redis (v4+). Shared by
 * the redis and redlock backends. Scripts run by EVALSHA with an EVAL fallback on NOSCRIPT, and
 * keys and tokens travel only as KEYS/ARGV. This file: what an adapter is, and what both share;
 * ioredis.ts and node-redis.ts are the two adapters, adapt.ts picks one for a client.
 */
import { digestHex } from '../../hash.js';
import { BackendError } from '../../errors.js';
import { scrubError } from '../../scrub.js';
import { race } from '../../wait.js';
import { slotOf } from './slots.js';

/**
 * The ioredis client methods leasehold calls (a `Redis` or a `Cluster`). Structural on purpose:
 * leasehold's declarations never import ioredis, so a project without it still type-checks.
 */
export interface IoredisLike {
  evalsha(...args: never[]): unknown;
  eval(...args: never[]): unknown;
  pipeline(...args: never[]): unknown;
  duplicate(...args: never[]): unknown;
}

/** The node-redis (v4+) client methods leasehold calls (`createClient()`, connected). */
export interface NodeRedisLike {
  evalSha(...args: never[]): unknown;
  eval(...args: never[]): unknown;
  duplicate(...args: never[]): unknown;
}

/** An ioredis or node-redis client: what `redis()`, `redlock()` and `fencedSet()` accept. */
export type RedisClientLike = IoredisLike | NodeRedisLike;

export interface Script {
  readonly source: string;
  readonly sha: string;
}

export function script(source: string): Script {
  return { source, sha: digestHex('sha1', source) };
}

export interface ScriptCall {
  readonly script: Script;
  readonly keys: readonly string[];
  readonly args: readonly (string | number)[];
}

export type MessageListener = (channel: string, message: string) => void;

export interface RedisAdapter {
  readonly kind: 'ioredis' | 'node-redis';
  /**
   * The prefix the client puts on every key it sends (its `keyPrefix`), '' if none. Scripts see
   * prefixed keys; channels are never prefixed, so a key a script publishes is read back with it.
   */
  readonly keyPrefix: string;
  /**
   * The client is known to put no prefix on keys (its keyPrefix read as ''): a script may then
   * name a lock's channel `{k}:changed` from its lock key, and the caller leaves it out.
   */
  readonly unprefixed?: boolean;
  /** A Redis Cluster client (ioredis `Cluster`, node-redis `createCluster`). */
  readonly cluster: boolean;
  /**
   * Runs scripts in one round trip per node (pipelined); results in order, an Error per failed
   * call. On a cluster each call's keys must share one slot; calls go to their slots' masters.
   */
  run(calls: readonly ScriptCall[]): Promise<unknown[]>;
  /**
   * One adapter per master (each runs keyless scripts such as SCAN on that node); `[this]` for
   * a single server. The adapters share the user's connections and own nothing to close.
   */
  masters(): Promise<RedisAdapter[]>;
  /**
   * Cluster: an adapter on the master that serves `slot` by the client's current slot table
   * (scripts sent through it reach that node only, with no redirection), or null if unknown.
   */
  nodeFor?(slot: number): Promise<{ id: string; adapter: RedisAdapter } | null>;
  /** A second connection for SUBSCRIBE, created on first use and closed by `close()`. */
  subscribe(channel: string, listener: MessageListener): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  close(): Promise<void>;
}

/** How long close() lets a subscriber connection say goodbye before dropping it. */
export const CLOSE_TIMEOUT_MS = 1000;

/** True if `p` fulfilled within `ms`; never rejects. */
export const settledWithin = (p: Promise<unknown>, ms: number): Promise<boolean> =>
  race(p, { ms }).then(
    () => true,
    () => false,
  );

export const isNoScript = (e: unknown) => e instanceof Error && /NOSCRIPT/i.test(e.message);

/** The indexes of the replies that are NOSCRIPT errors (those calls did not run). */
export function noScriptAt(res: readonly unknown[]): number[] {
  const out: number[] = [];
  res.forEach((r, i) => {
    if (isNoScript(r)) out.push(i);
  });
  return out;
}

/**
 * A client error as a BackendError whose cause is scrubbed: ioredis attaches the command's
 * arguments (lease tokens) to reply errors, and a client error may reach the client's options.
 */
export function wrap(e: unknown): Error {
  if (e instanceof BackendError) return scrubError(e);
  const cause = scrubError(e);
  return new BackendError(`redis: ${cause.message}`, { cause });
}

/** Neither the client nor its options (a password) print, at any depth. */
export const hidden = (kind: string) => `RedisAdapter { ${kind} }`;

/**
 * The client's `keyPrefix`, '' if none: ioredis `options.keyPrefix` (a Cluster's may sit in
 * `redisOptions`), node-redis (v5.x+) `_keyPrefix` (a pool's in `clientOptions`). Null when it
 * cannot be read or is not a string (a Buffer): then nothing may assume there is none.
 */
export function keyPrefixOf(client: any): string | null {
  try {
    const o = client.options;
    const p = client._keyPrefix ?? o?.keyPrefix ?? o?.redisOptions?.keyPrefix ?? o?.clientOptions?.keyPrefix;
    return p === undefined ? '' : typeof p === 'string' ? p : null;
  } catch {
    return null;
  }
}

export const isRedirect = (e: unknown) => e instanceof Error && /\b(MOVED|ASK|TRYAGAIN|CLUSTERDOWN)\b/.test(e.message);

/**
 * ioredis `Cluster`: a pipeline must stay within one node's slots, so calls are grouped by the
 * node that serves their slot (by the client's slot table) and each group is one pipeline, all
 * sent at once: one round trip per node. A call that met MOVED/ASK (resharding, failover) or a
 * group the client refused (its slot table changed under us) is sent again on its own, where
 * the client follows the redirection.
 */
export async function runPerNode(
  client: any,
  calls: readonly ScriptCall[],
  runGroup: (calls: readonly ScriptCall[]) => Promise<unknown[]>,
): Promise<unknown[]> {
  const groups = new Map<string, number[]>();
  calls.forEach((c, i) => {
    const slot = c.keys.length ? slotOf(c.keys[0]!) : 0;
    const owner: string = (client.slots?.[slot] as string[] | undefined)?.[0] ?? `slot:${slot}`;
    const g = groups.get(owner);
    if (g) g.push(i);
    else groups.set(owner, [i]);
  });
  const out: unknown[] = new Array(calls.length);
  await Promise.all(
    [...groups.values()].map(async (idx) => {
      let res: unknown[] | null = null;
      try {
        res = await runGroup(idx.map((i) => calls[i]!));
      } catch {
        res = null; // the whole pipeline was refused: each call alone below
      }
      const again: number[] = [];
      idx.forEach((i, j) => {
        const r = res?.[j];
        if (!res || isRedirect(r)) again.push(i);
        else out[i] = r;
      });
      await Promise.all(
        again.map(async (i) => {
          [out[i]] = await runGroup([calls[i]!]);
        }),
      );
    }),
  );
  return out;
}
