/**
 * One Redlock acquire attempt, usually one round:
 *
 *   round 1  every node runs ACQUIRE (SET NX PX of `<attempt id><token>`, holder value, and its
 *            fence counter: INCR, or seeded from the node's TIME in µs when missing). Decided as
 *            soon as a majority granted (or cannot): stragglers never delay it.
 *            fence = max(counters of the granting nodes). When a majority of nodes already stores
 *            that max (counters move in step: the usual case) the grant is complete.
 *   round 2  only when counters were out of step: the fence is written back — only upward, and
 *            only while this very attempt's copy is there — to the granting nodes below it, until
 *            a majority stores it.
 *
 * The grant counts while the validity `ttl − elapsed − drift` is still positive. A failed attempt
 * gives back its copies at once (attempt-checked, so the clean-up can never delete a copy that a
 * later attempt with the same token holds); copies that arrive late are given back when they
 * arrive, and `close()` waits for those clean-ups.
 */
import type { AcquireRequest, Grant } from '../../backend.js';
import { BackendError, QuorumError } from '../../errors.js';
import type { ScriptCall } from '../redis/client.js';
import { type Grants, newAttemptId } from './grants.js';
import type { NodeHandle, RedlockConfig } from './options.js';
import { bounded, causesOf, type Health, isHardFailure, round, tally } from './quorum.js';
import {
  ACQUIRE,
  channelOf,
  fenceKey,
  grantedChannelOf,
  isOne,
  isZero,
  lockKey,
  PIN,
  pinKey,
  placesKey,
  queueKey,
  RELEASE,
  valueKey,
  WRITE_FENCE,
} from './scripts.js';
import { PLACE_MS, TURN_MS, type Wakeups } from './wakeups.js';

/** What an attempt needs from its backend. */
export interface Ctx {
  readonly nodes: readonly NodeHandle[];
  readonly cfg: RedlockConfig;
  readonly quorum: number;
  readonly all: readonly number[];
  readonly health: Health;
  readonly grants: Grants;
  readonly wakeups: Wakeups;
  label(i: number): string;
  one(i: number, call: ScriptCall): Promise<unknown>;
  drift(ttlMs: number): number;
  /** A clean-up still under way: `close()` waits for it (bounded). */
  track(p: Promise<unknown>): void;
}

function parseCounter(r: unknown): bigint | null {
  if (!Array.isArray(r)) throw new BackendError(`redlock: unexpected acquire reply ${String(r)}`);
  if (!isOne(r[0])) return null;
  const c = r[1];
  if ((typeof c !== 'string' && typeof c !== 'number') || !/^\d+$/.test(String(c))) {
    throw new BackendError(`redlock: fence counter is not a non-negative integer: ${String(c)}`);
  }
  return BigInt(c);
}

/**
 * When the lock can be free on a majority at the earliest, from the refusing nodes' PTTLs: `more`
 * of them must expire (the nodes that granted this attempt are free again). 0: unknown.
 */
function freeIn(pttls: readonly (number | undefined)[], more: number): number {
  if (more <= 0) return 0;
  const left = pttls.filter((t): t is number => t !== undefined).map((t) => (t < 0 ? Infinity : t));
  if (left.length < more) return 0;
  left.sort((a, b) => a - b);
  const t = left[more - 1]!;
  return Number.isFinite(t) ? t : 0;
}

export const releaseKeys = (key: string) => [
  lockKey(key),
  valueKey(key),
  pinKey(key),
  fenceKey(key),
  queueKey(key),
  placesKey(key),
];

/**
 * Token- and attempt-checked delete on one node (id '' = any attempt of the token); never rejects.
 * With `publish`, the head waiter there is woken (the attempt id doubles as the release id).
 */
export function releaseOn(
  ctx: Ctx,
  i: number,
  key: string,
  token: string,
  id: string,
  publish: boolean,
  arrival?: number,
) {
  const place = arrival === undefined ? ['', 0, 0] : [ctx.wakeups.channel, arrival, PLACE_MS];
  const args = [
    token,
    id,
    channelOf(key),
    publish ? '1' : '0',
    '',
    ctx.cfg.fenceIdleMs,
    id + key,
    '',
    ...place,
    TURN_MS,
  ];
  return ctx.one(i, { script: RELEASE, keys: releaseKeys(key), args }).then(
    (r) => isOne(r),
    () => false,
  );
}

export async function acquire(ctx: Ctx, key: string, request: AcquireRequest): Promise<Grant | null> {
  const { token, ttlMs } = request;
  const n = ctx.nodes.length;
  const q = ctx.quorum;
  const validity = ttlMs - ctx.drift(ttlMs);
  const start = performance.now();
  const left = () => validity - (performance.now() - start);
  const id = newAttemptId();
  const stored = id + token;
  const keys = [lockKey(key), fenceKey(key), valueKey(key), pinKey(key), queueKey(key), placesKey(key)];
  const hasValue = request.value !== undefined;
  const queued = request.queue === true;
  // a waiting attempt (re)registers this backend's wake channel in the key's waiter queue
  const before = queued ? ctx.wakeups.before(key, token) : null;
  const args = [
    stored,
    ttlMs,
    hasValue ? '1' : '0',
    request.value ?? '',
    ctx.cfg.fenceIdleMs,
    grantedChannelOf(key),
    before ? ctx.wakeups.channel : '',
    before ? before.arrival : 0,
    PLACE_MS,
  ];
  const pttls: (number | undefined)[] = [];
  // the nodes' clocks, from queued refusals: the next arrivals are aligned to them
  const clocks: { node: number; sent: number; received: number }[] = [];
  const sent = before ? ctx.wakeups.wallNow() : 0;
  const r1 = await round(
    ctx.all,
    (i) =>
      ctx.one(i, { script: ACQUIRE, keys, args }).then((r) => {
        if (Array.isArray(r) && isZero(r[0]) && r.length > 1) {
          pttls[i] = Number(r[1]);
          if (before && r.length > 2) clocks.push({ node: Number(r[2]), sent, received: ctx.wakeups.wallNow() });
        }
        return parseCounter(r);
      }),
    Math.min(ctx.cfg.nodeTimeoutMs, validity),
    (outs): 'granted' | 'refused' | undefined => {
      const t = tally(outs, (c) => c !== null);
      if (t.yes >= q) return 'granted';
      if (t.no + t.failed > n - q) return 'refused';
      return undefined;
    },
    ctx.label,
    ctx.health,
  );
  const counters = r1.outcomes.map((o) => (o?.ok === true ? o.value : null));
  const granted = ctx.all.filter((i) => counters[i] != null);
  const causes = causesOf(r1.outcomes, n);

  let fence: bigint | null = null;
  if (r1.decision === 'granted' && left() > 0) {
    const max = granted.reduce((m, i) => (counters[i]! > m ? counters[i]! : m), 0n);
    const behind = granted.filter((i) => counters[i]! < max);
    const atMax = granted.length - behind.length;
    if (atMax >= q) {
      fence = max;
    } else {
      const wargs = [stored, max.toString(), ctx.cfg.fenceIdleMs, grantedChannelOf(key)];
      const r2 = await round(
        behind,
        (i) => ctx.one(i, { script: WRITE_FENCE, keys, args: wargs }),
        Math.min(ctx.cfg.nodeTimeoutMs, Math.max(1, left())),
        (outs, pending) => {
          const t = tally(outs, isOne);
          if (atMax + t.yes >= q) return true;
          if (atMax + t.yes + pending < q) return false;
          return undefined;
        },
        ctx.label,
        ctx.health,
      );
      if (r2.decision) fence = max;
      r2.outcomes.forEach((o, i) => {
        if (o && !o.ok) causes[i] = o.error;
      });
    }
    if (left() <= 0) fence = null;
  }
  const entry = fence === null ? null : ctx.grants.add(key, token, id, fence, ttlMs);
  // the highest counter seen: given back to the nodes on release, so counters come back in step
  if (entry) for (const c of counters) if (c != null) ctx.grants.saw(key, token, id, c);

  // A node that grants after the decision joins a grant that is still held, so the lock keeps
  // surviving node failures: a lower counter is raised to the fence, a higher one (a counter seeded
  // later, say) gets the fence pinned beside this copy. Otherwise the copy is given back.
  r1.late.forEach((p, i) => {
    if (!p) return;
    ctx.track(
      p.then(async (o) => {
        if (!o.ok || o.value === null) return;
        // released already: that release reached this node after its grant (one connection, in
        // order) and deleted the copy
        if (entry?.released) return;
        if (fence !== null && ctx.grants.holds(key, token, id)) {
          ctx.grants.saw(key, token, id, o.value);
          if (o.value === fence) return;
          const f = fence.toString();
          const call =
            o.value < fence
              ? { script: WRITE_FENCE, keys, args: [stored, f, ctx.cfg.fenceIdleMs, grantedChannelOf(key)] }
              : { script: PIN, keys: [lockKey(key), pinKey(key)], args: [stored, f, grantedChannelOf(key)] };
          await ctx.one(i, call).catch(() => {});
          return;
        }
        // a failed waiting attempt keeps its place there too (the nodes keep agreeing on the head)
        await releaseOn(ctx, i, key, token, id, true, fence === null ? before?.arrival : undefined);
      }),
    );
  });
  if (fence !== null) {
    if (before) ctx.wakeups.forget(key, token);
    return { fence };
  }
  // the clean-ups below wake the head waiter; when that is this backend, they must not wake it
  if (before) {
    ctx.wakeups.refused(key, before.wakes, freeIn(pttls, q - granted.length), id);
    ctx.wakeups.observe(clocks);
  }

  // Failed: give back every partial grant at once (bounded: a dead node must not hold us up).
  // a waiting attempt keeps its place on the nodes that granted it, as on those that refused
  const back = granted.map((i) =>
    bounded(releaseOn(ctx, i, key, token, id, true, before?.arrival), ctx.cfg.nodeTimeoutMs, false),
  );
  await Promise.all(back);
  r1.outcomes.forEach((o, i) => {
    // A node that failed with an error may still have run the script: best effort.
    if (o && !o.ok && !r1.late[i]) ctx.track(releaseOn(ctx, i, key, token, id, true, before?.arrival));
  });
  const failed = causes.filter((c) => c !== null && isHardFailure(c)).length;
  if (failed > n - q) {
    throw new QuorumError(
      `redlock: acquire "${key}": ${failed} of ${n} nodes failed, a majority (${q}) is out of reach`,
      causes,
    );
  }
  return null;
}
