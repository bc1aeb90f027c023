/**
 * Redlock over N independent Redis masters, with fencing tokens that hold across the quorum.
 *
 *   acquire  one round in the usual case (see acquire.ts): SET NX PX + the node's fence counter on
 *            every node; fence = max of the granting nodes' counters, complete once a majority
 *            stores it; a write-back round only when counters were out of step.
 *   extend   every item in one pipelined round per node; true where a majority extended in time.
 *   release  compare-and-delete on every node, which wakes the next waiter only (wakeups.ts);
 *            true if a majority still held it.
 *   inspect  / list / results / watch: majority reads and pub/sub (read.ts, watch below).
 *
 * The safety argument and its limits are in docs/redlock.md.
 */
import { inspect } from 'node:util';
import type {
  AcquireRequest,
  Backend,
  BackendCapabilities,
  ExtendItem,
  Grant,
  LockInfo,
  ResultStore,
} from '../../backend.js';
import { BackendError, ClosedError, InvalidArgumentError, QuorumError } from '../../errors.js';
import type { RedisClientLike, ScriptCall } from '../redis/client.js';
import { acquire, type Ctx, releaseKeys } from './acquire.js';
import { Grants } from './grants.js';
import { type NodeHandle, parseClients, parseOptions, type RedlockConfig, type RedlockOptions } from './options.js';
import { bounded, causesOf, Health, isHardFailure, type Outcome, round, tally } from './quorum.js';
import { inspectMany, list, resultStore } from './read.js';
import {
  channelOf,
  EXTEND,
  fenceKey,
  grantedChannelOf,
  isOne,
  LEAVE,
  lockKey,
  pinKey,
  placesKey,
  queueKey,
  RELEASE,
  valueKey,
} from './scripts.js';
import { Subscriptions } from './subscriptions.js';
import { TURN_MS, Wakeups } from './wakeups.js';

export type { RedlockOptions } from './options.js';
export type { IoredisLike, NodeRedisLike, RedisClientLike } from '../redis/client.js';
export { reseedFences, type ReseedOptions } from './reseed.js';

/**
 * A Redlock backend over `clients` (ioredis or node-redis, each connected to an independent Redis
 * master). Needs at least 3 clients unless `allowFewerThanThree` is set. Never closes the clients.
 */
export function redlock(clients: readonly RedisClientLike[], opts?: RedlockOptions): Backend {
  const cfg = parseOptions(opts);
  const nodes = parseClients(clients, cfg.allowFewerThanThree);
  return new RedlockBackend(nodes, cfg);
}

class RedlockBackend implements Backend {
  readonly name = 'redlock';
  readonly capabilities: BackendCapabilities = {
    push: true,
    fair: true,
    value: true,
    results: true,
    session: false,
  };
  readonly results: ResultStore;
  private readonly quorum: number;
  private readonly all: number[];
  private readonly subs: Subscriptions[];
  private readonly wakeups: Wakeups;
  private readonly pending = new Set<Promise<unknown>>();
  private readonly ctx: Ctx;
  private closed = false;

  constructor(
    private readonly nodes: readonly NodeHandle[],
    private readonly cfg: RedlockConfig,
  ) {
    this.quorum = Math.floor(nodes.length / 2) + 1;
    this.all = nodes.map((_, i) => i);
    this.subs = nodes.map((n) => new Subscriptions(n.adapter));
    this.wakeups = new Wakeups(
      nodes.map((n) => n.adapter),
      nodes.length - this.quorum + 1,
      cfg.nodeTimeoutMs,
      cfg.pollMs,
    );
    this.ctx = {
      nodes,
      cfg,
      quorum: this.quorum,
      all: this.all,
      health: new Health(nodes.length, cfg.nodeTimeoutMs),
      grants: new Grants(),
      wakeups: this.wakeups,
      label: (i) => this.nodes[i]!.label,
      one: (i, call) => this.one(i, call),
      drift: (ttlMs) => this.drift(ttlMs),
      track: (p) => {
        const t = p.catch(() => {}).finally(() => this.pending.delete(t));
        this.pending.add(t);
      },
    };
    this.results = resultStore(this.ctx);
  }

  private readonly label = (i: number) => this.nodes[i]!.label;
  private get health() {
    return this.ctx.health;
  }
  private get grants() {
    return this.ctx.grants;
  }

  private drift(ttlMs: number): number {
    return Math.round(ttlMs * this.cfg.driftFactor) + this.cfg.driftMs;
  }

  /** The engine counts a lease valid for `ttl − elapsed − drift` with this drift too, not only its own. */
  driftMs(ttlMs: number): number {
    return this.drift(ttlMs);
  }

  private assertOpen(): void {
    if (this.closed) throw new ClosedError('redlock: backend is closed');
  }

  private check(token: unknown, ttlMs: unknown, what: string): void {
    this.assertOpen();
    if (typeof token !== 'string' || token.length === 0) {
      throw new InvalidArgumentError(`redlock ${what}: token must be a non-empty string`);
    }
    if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < 1) {
      throw new InvalidArgumentError(`redlock ${what}: ttlMs must be an integer ≥ 1, got ${String(ttlMs)}`);
    }
    if (ttlMs <= this.drift(ttlMs)) {
      throw new InvalidArgumentError(
        `redlock ${what}: ttl ${ttlMs}ms leaves no validity after the clock drift allowance (${this.drift(ttlMs)}ms)`,
      );
    }
  }

  /** Runs one script on one node; a script error rejects. */
  private async one(i: number, call: ScriptCall): Promise<unknown> {
    const [r] = await this.nodes[i]!.adapter.run([call]);
    if (r instanceof Error) throw r;
    return r;
  }

  private quorumError(outs: readonly (Outcome<unknown> | undefined)[], what: string): QuorumError | null {
    const n = this.nodes.length;
    const causes = causesOf(outs, n);
    const failed = causes.filter((c) => c !== null && isHardFailure(c)).length;
    if (failed <= n - this.quorum) return null;
    return new QuorumError(`redlock: ${what}: ${failed} of ${n} nodes failed, a majority is out of reach`, causes);
  }

  async acquire(key: string, request: AcquireRequest): Promise<Grant | null> {
    this.check(request?.token, request?.ttlMs, 'acquire');
    if (request.value !== undefined && typeof request.value !== 'string') {
      throw new InvalidArgumentError('redlock acquire: value must be a string');
    }
    return acquire(this.ctx, key, request);
  }

  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    this.assertOpen();
    if (!Array.isArray(items)) throw new InvalidArgumentError('redlock extend: items must be an array');
    if (items.length === 0) return [];
    for (const it of items) {
      if (typeof it?.key !== 'string' || it.key.length === 0) {
        throw new InvalidArgumentError('redlock extend: every item needs a non-empty key');
      }
      this.check(it.token, it.ttlMs, 'extend');
    }
    const q = this.quorum;
    const start = performance.now();
    // the longest validity bounds the round: a short-TTL item must not cut the others' wait (each
    // item is judged against its own validity below)
    const validity = items.reduce((m, it) => Math.max(m, it.ttlMs - this.drift(it.ttlMs)), 0);
    const calls: ScriptCall[] = items.map((it) => ({
      script: EXTEND,
      keys: [lockKey(it.key), valueKey(it.key), fenceKey(it.key), pinKey(it.key)],
      // this process's attempt exactly, so a straggling copy of a failed attempt never counts
      args: [it.token, it.ttlMs, this.grants.idOf(it.key, it.token), this.cfg.fenceIdleMs],
    }));
    const yesOf = (outs: readonly (Outcome<unknown[]> | undefined)[]) =>
      items.map((_, j) => outs.filter((o) => o?.ok === true && isOne(o.value[j])).length);
    const r = await round(
      this.all,
      async (i) => {
        const res = await this.nodes[i]!.adapter.run(calls);
        if (res.length !== calls.length) throw new BackendError('redlock: pipeline answered the wrong count');
        return res;
      },
      Math.min(this.cfg.nodeTimeoutMs, validity),
      (outs, pending) => (yesOf(outs).every((y) => y >= q || y + pending < q) ? true : undefined),
      this.label,
      this.health,
    );
    const elapsed = performance.now() - start;
    const lost = this.quorumError(r.outcomes, 'extend');
    if (lost) throw lost;
    const yes = yesOf(r.outcomes);
    return items.map((it, j) => {
      const ok = yes[j]! >= q && it.ttlMs - elapsed - this.drift(it.ttlMs) > 0;
      this.grants.renewed(it.key, it.token, it.ttlMs, ok);
      return ok;
    });
  }

  async release(key: string, token: string): Promise<boolean> {
    this.assertOpen();
    if (typeof token !== 'string' || token.length === 0) {
      throw new InvalidArgumentError('redlock release: token must be a non-empty string');
    }
    const q = this.quorum;
    const grant = this.grants.get(key, token);
    this.grants.released(key, token);
    // every copy of this token, whichever attempt set it: the holder gives them all up
    const floor = grant && grant.floor > grant.fence ? grant.floor.toString() : '';
    // one id for this release on every node: the head's backend hears it once per node, counts it once
    const args = [
      token,
      '',
      channelOf(key),
      '1',
      floor,
      this.cfg.fenceIdleMs,
      this.wakeups.nextId() + key,
      // the holder waits no more: its place goes, unless another Locks' waiter of this backend
      // waits on the key (they share the place)
      this.wakeups.waiting(key) ? '' : this.wakeups.channel,
      '',
      0,
      0,
      TURN_MS,
    ];
    const r = await round(
      this.all,
      (i) => this.one(i, { script: RELEASE, keys: releaseKeys(key), args }),
      this.cfg.nodeTimeoutMs,
      (outs, pending) => {
        const t = tally(outs, isOne);
        if (t.yes >= q) return true;
        if (t.yes + pending < q) return false;
        return undefined;
      },
      this.label,
      this.health,
    );
    if (r.decision) return true;
    const n = this.nodes.length;
    const causes = causesOf(r.outcomes, n);
    const failed = causes.filter((c) => c !== null).length;
    if (failed > n - q) {
      throw new QuorumError(`redlock: release "${key}": ${failed} of ${n} nodes failed, outcome unknown`, causes);
    }
    return false;
  }

  async inspect(key: string): Promise<LockInfo | null> {
    this.assertOpen();
    return (await inspectMany(this.ctx, [key]))[0]!;
  }

  list(prefix: string): AsyncIterable<LockInfo> {
    this.assertOpen();
    if (typeof prefix !== 'string') throw new InvalidArgumentError('redlock list: prefix must be a string');
    return list(this.ctx, prefix);
  }

  /**
   * Pushes every change of holder: grants (each granting node publishes on `{key}:granted`, and a
   * fence write-back does too) and releases (`{key}:released`), heard on any node. Subscribed on
   * every node; resolves once at least N − q + 1 nodes confirmed (every change touches a
   * majority, so it reaches one of them), else rejects with QuorumError.
   */
  async watch(key: string, onChange: () => void): Promise<() => void> {
    this.assertOpen();
    if (typeof onChange !== 'function') throw new InvalidArgumentError('redlock watch: onChange must be a function');
    const channels = [channelOf(key), grantedChannelOf(key)];
    let live = true;
    const fire = () => {
      if (live) onChange();
    };
    const stop = () => {
      live = false;
      for (const s of this.subs) for (const c of channels) s.remove(c, fire);
    };
    const oks = await Promise.all(
      this.subs.map(async (s) => {
        const both = await Promise.all(channels.map((c) => bounded(s.add(c, fire), this.cfg.nodeTimeoutMs, false)));
        return both.every(Boolean);
      }),
    );
    const n = this.nodes.length;
    const ok = oks.filter(Boolean).length;
    if (ok < n - this.quorum + 1) {
      stop();
      const causes = oks.map((o, i) => (o ? null : new BackendError(`${this.label(i)}: could not subscribe`)));
      throw new QuorumError(`redlock: watch "${key}": only ${ok} of ${n} nodes could be subscribed to`, causes);
    }
    return stop;
  }

  /**
   * A waiter that gave up leaves the key's waiter queue on every node (best effort, bounded; a
   * place it keeps lapses within PLACE_MS anyway), so the next release wakes the next waiter.
   */
  async leave(key: string, token: string): Promise<void> {
    // another Locks' waiter of this backend on the key keeps the shared place (and its wake-ups)
    if (!this.wakeups.forget(key, token)) return;
    if (this.closed) return;
    const call = {
      script: LEAVE,
      keys: [queueKey(key), placesKey(key), lockKey(key)],
      args: [this.wakeups.channel, this.wakeups.nextId() + key, TURN_MS],
    };
    await Promise.all(this.all.map((i) => bounded(this.one(i, call), this.cfg.nodeTimeoutMs, 0)));
  }

  /**
   * Resolves when this backend's wake channel hears a release of `key` (sent to the head waiter
   * only), at the holder's expiry as the refusals reported it, or after at most REFRESH_MS, when
   * the caller attempts again and so refreshes its place (wakeups.ts).
   */
  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (this.closed || signal.aborted) return Promise.resolve();
    return this.wakeups.wait(key, signal, maxMs);
  }

  /**
   * Wakes waiters, waits (at most twice the node timeout) for the clean-ups of failed attempts
   * still under way — copies a late node granted are given back even when the process exits right
   * after — and closes the subscriber connections. Never closes the user's clients.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeups.close();
    if (this.pending.size > 0) await bounded(Promise.all([...this.pending]), 2 * this.cfg.nodeTimeoutMs, undefined);
    await Promise.all(this.subs.map((s) => s.close()));
  }

  /** Neither the clients nor their options (passwords) print, at any depth. */
  [inspect.custom](): string {
    return `RedlockBackend { nodes: ${this.nodes.length}, quorum: ${this.quorum}${this.closed ? ', closed' : ''} }`;
  }
  toJSON(): { name: string; nodes: number; quorum: number } {
    return { name: this.name, nodes: this.nodes.length, quorum: this.quorum };
  }
}
