/**
 * Single-node Redis backend for ioredis and node-redis. Acquire: one script (SET NX PX + the
 * fence; a fair arrival queue once anyone waits). Release: one script (compare-and-delete, then
 * the lock is handed to the queue's first live waiter with a short claim lease, and one message
 * on that waiter's backend channel wakes it; its next acquire confirms). Extend: one script per
 * chunk of leases, all chunks pipelined in one round trip. Each backend subscribes to its own
 * channel once; a waiter also re-checks within a bound (a lost message, a dead head).
 */
import { inspect } from 'node:util';
import type {
  AcquireRequest,
  Backend,
  ExtendItem,
  Grant,
  LockInfo,
  ResultStore,
  LostCallback,
  SessionRenewal,
} from '../../backend.js';
import { toMs, type Duration } from '../../duration.js';
import { BackendError, ClosedError, InvalidArgumentError } from '../../errors.js';
import { driftMs } from '../../lease.js';
import { checkBoolean, checkOptions } from '../../validate.js';
import { now } from '../../wait.js';
import { adapt } from './adapt.js';
import type { RedisAdapter, RedisClientLike } from './client.js';
import { CHUNK, checkClusterKey, declared, lockKeyOf, redisKeys } from './keys.js';
import { ACQUIRE, EXTEND_MANY, GET_RESULT, INSPECT, LEAVE, PUT_RESULT, RELEASE } from './scripts.js';
import { Sessions } from './session.js';
import { Wakeups } from './wakeups.js';
import { redisAdmin } from './list.js';
import { Watchers } from './watch.js';
import { clusterExtend, renewalCalls, spreadFlags, TryAgainAdapter } from './cluster.js';
import { markTransient } from '../../transient.js';

export { fencedSet, fenceKeyOf, resourceKeyOf } from './fenced.js';
export { adapt } from './adapt.js';
export { checkClusterKey, redisKeys } from './keys.js';
export {
  script,
  type IoredisLike,
  type NodeRedisLike,
  type RedisAdapter,
  type RedisClientLike,
  type Script,
  type ScriptCall,
} from './client.js';

export interface RedisOptions {
  /** How long a key's `watch` subscription lingers after its last watcher left (default 2000ms; 0 or more). */
  lingerMs?: Duration;
  /**
   * How long a queued waiter's place lasts unless the waiter refreshes it (default 3s, at least
   * 300ms). Whatever the lease TTL: a waiter that died stops blocking the lock after this long.
   * A waiting caller refreshes its place every third of it.
   */
  placeTtl?: Duration;
  /**
   * How long a key's fence counter outlives its last grant or renewal (default 24h, at least
   * 1s). A counter that is gone is seeded again from the server's clock, above every fence it
   * issued before, as long as that clock did not step back by more than this (docs/redis.md).
   */
  fenceIdle?: Duration;
  /**
   * Session renewal (default false; single server or Sentinel, not Redis Cluster): renewed leases
   * hang off one session key per TTL of this backend, and a renewal tick renews only those keys
   * (one round trip, whatever the number of leases). A lock whose session lapsed is free. A lock
   * deleted or overwritten from outside is noticed at its rare refresh (docs/redis.md, "Sessions").
   */
  session?: boolean;
}

/** The backend's settings, resolved. */
export interface RedisConfig {
  readonly lingerMs: number;
  readonly placeMs: number;
  readonly fenceIdleMs: number;
  /** Session renewal (RedisOptions.session). */
  readonly session?: boolean;
  /** How long a lock handed to a waiter by a release waits for that waiter to confirm it. */
  readonly claimMs: number;
  /** Session mode: the least PX of a lock that hangs off a session (LOCK_PX_MIN; tests shorten it). */
  readonly lockPxMinMs?: number;
}

/** A hand-over's claim lease: a few round trips on a loaded machine; a dead head costs this once. */
const CLAIM_MS = 500;

/** A backend over one Redis server, through the caller's ioredis or node-redis client (never closed by us). */
export function redis(client: RedisClientLike, options?: RedisOptions): RedisBackend {
  const o = checkOptions<RedisOptions>(options, ['lingerMs', 'placeTtl', 'fenceIdle', 'session'], 'redis');
  const session = checkBoolean(o.session, 'redis: session') ?? false;
  const lingerMs = o.lingerMs === undefined ? 2000 : toMs(o.lingerMs, 'redis: lingerMs', { allowZero: true });
  const placeMs = o.placeTtl === undefined ? 3000 : toMs(o.placeTtl, 'redis: placeTtl');
  if (placeMs < 300) throw new InvalidArgumentError(`redis: placeTtl must be at least 300ms, got ${placeMs}ms`);
  const fenceIdleMs = o.fenceIdle === undefined ? 86_400_000 : toMs(o.fenceIdle, 'redis: fenceIdle');
  if (fenceIdleMs < 1000) throw new InvalidArgumentError(`redis: fenceIdle must be at least 1s, got ${fenceIdleMs}ms`);
  const found = adapt(client, 'redis(client)');
  const adapter = found.cluster ? new TryAgainAdapter(found) : found;
  if (session && adapter.cluster) {
    throw new InvalidArgumentError(
      'redis: session renewal needs a single server or Sentinel; on Redis Cluster leases are renewed per master',
    );
  }
  return new RedisBackend(adapter, { lingerMs, placeMs, fenceIdleMs, claimMs: CLAIM_MS, session }, client);
}

export class RedisBackend implements Backend {
  readonly name = 'redis';
  readonly capabilities = { push: true, fair: true, value: true, results: true, session: false } as const;
  readonly results: ResultStore = {
    get: async (lockKey) => {
      const [r] = await this.adapter.run([{ script: GET_RESULT, keys: [redisKeys(lockKey).result], args: [] }]);
      if (r instanceof Error) throw r;
      return r === null || r === undefined || r === false ? null : String(r);
    },
    put: async (lockKey, token, value, ttlMs) => {
      const k = redisKeys(lockKey);
      const [r] = await this.adapter.run([
        { script: PUT_RESULT, keys: [k.lock, k.result], args: [token, value, ttlMs] },
      ]);
      if (r instanceof Error) throw r;
      return Number(r) === 1;
    },
  };
  /** Session mode: renews every session key named by grants, in one round trip. */
  readonly renewSessions?: (sessions: readonly string[]) => Promise<SessionRenewal[]>;
  /** Session mode: a lease that hangs off a session is valid only while its lock's long PX surely lives. */
  readonly validUntil?: (key: string, token: string) => number | undefined;
  /**
   * Session mode: every Locks on this backend hears of each lease found lost (its session lapsed,
   * its lock broken or overwritten), whichever Locks' renewal found it: they share the sessions.
   */
  readonly onLost?: (cb: LostCallback) => void;
  private readonly wakeups: Wakeups;
  private readonly watchers: Watchers;
  private closed = false;
  /** Session mode: its sessions and the leases that hang off them (session.ts). */
  private readonly sessions?: Sessions;

  constructor(
    readonly adapter: RedisAdapter,
    private readonly cfg: RedisConfig,
    _client?: unknown,
  ) {
    this.wakeups = new Wakeups(adapter, Math.floor(cfg.placeMs / 3));
    this.watchers = new Watchers(adapter, cfg.lingerMs);
    Object.assign(this, redisAdmin(adapter, redisKeys, cfg)); // list, forceRelease
    if (cfg.session) {
      const sessions = new Sessions(adapter, cfg.lockPxMinMs, (ttl) => this.fenceTtl(ttl));
      this.sessions = sessions;
      this.renewSessions = (ids) => sessions.renew(ids);
      this.validUntil = (key, token) => sessions.validUntil(key, token);
      this.onLost = (cb) => sessions.onLost(cb);
    }
  }

  /** A closed backend grants, renews and reads nothing (a release still goes through). */
  private assertOpen(): void {
    if (this.closed) throw new ClosedError('redis: backend closed');
  }

  async acquire(key: string, req: AcquireRequest, retried = false): Promise<Grant | null> {
    this.assertOpen();
    if (this.adapter.cluster) checkClusterKey(this.adapter.keyPrefix, key);
    const lock = lockKeyOf(key);
    const queue = req.queue === true;
    const sessions = this.sessions;
    let s = sessions && req.renew === true ? sessions.session(req.ttlMs) : null;
    // a new session's key is created by one acquire only (its creator); the others wait for its
    // reply, so no acquire in flight can create a key that once existed and lapsed (a revival)
    while (s && s.creating) {
      await s.creating;
      this.assertOpen();
      s = sessions!.session(req.ttlMs);
    }
    const create = s !== null && sessions!.create(s);
    const { token } = req;
    const { fenceIdleMs, placeMs, claimMs } = this.cfg;
    const value = req.value ?? '';
    const member = queue ? this.member(token) : '';
    if (queue) {
      // the engine asks handedOver() itself after a pause (then this finds nothing, one map
      // lookup); kept so that the driver alone takes a hand-over the same way
      const g = this.handedOver(key, req);
      if (g) return g;
    }
    const wakes = queue ? this.wakeups.before(lock, token) : 0;
    let r: unknown;
    let replied = false;
    const sentAt = now();
    try {
      const [res] = await this.adapter.run([
        s
          ? {
              script: ACQUIRE,
              keys: [lock, `${lock}:fence`, s.key],
              args: [
                token,
                req.ttlMs,
                fenceIdleMs,
                value,
                member,
                placeMs,
                claimMs,
                `${lock}:changed`,
                sessions!.lockPx(req.ttlMs),
                create ? '1' : '0',
              ],
            }
          : {
              script: ACQUIRE,
              keys: this.adapter.cluster ? declared(lock) : [lock, `${lock}:fence`],
              // the channel is named from the lock key in the script when no prefix is on it
              args: this.adapter.unprefixed
                ? [token, req.ttlMs, fenceIdleMs, value, member, placeMs, claimMs]
                : [token, req.ttlMs, fenceIdleMs, value, member, placeMs, claimMs, `${lock}:changed`],
            },
      ]);
      r = res;
      if (r instanceof Error) throw r;
      replied = true;
    } catch (e) {
      if (queue) this.wakeups.forget(lock, token);
      throw e;
    } finally {
      // no reply to the creator: its key may exist or not, and may still be created by the
      // command in flight; the session is never used again (the waiters start a new one)
      if (create) sessions!.created(s!, replied);
    }
    if (s && r === 'gone') {
      // the session lapsed (a pause, an eviction): its leases are lost; a new one takes this lease
      if (queue) this.wakeups.forget(lock, token);
      sessions!.ended(s);
      if (retried)
        throw markTransient(new BackendError('redis: a new session key lapsed at once (is the server evicting keys?)'));
      return this.acquire(key, req, true);
    }
    if (s) sessions!.confirm(s, sentAt);
    // a grant's fence is a positive integer as a string; a refusal is an integer ≤ 0, which a
    // client may give as a string too (ioredis `stringNumbers`): never read as a grant
    if (typeof r === 'string' && r.charCodeAt(0) > 48 && r.charCodeAt(0) <= 57) {
      if (queue) this.wakeups.forget(lock, token);
      if (!s) return { fence: BigInt(r) };
      sessions!.bind(key, token, s, sentAt);
      return { fence: BigInt(r), session: s.key };
    }
    if (queue) {
      // a queued refusal also says when the server ran it, in µs (a hand-over after it is ours)
      const [neg, serverUs] = Array.isArray(r) ? r : [r, NaN];
      this.wakeups.refused(lock, wakes, -Number(neg), sentAt, Number(serverUs), token);
    }
    return null;
  }

  /**
   * Handed over by a release since our last refusal: ours, without a round trip, while the claim
   * has at least half of its time left (the keeper's first renewal turns it into the TTL). Only
   * for renewed leases with their own expiry (not session mode: a session lease is confirmed).
   */
  handedOver(key: string, req: AcquireRequest): Grant | null {
    if (req.renew !== true || this.cfg.session) return null;
    const lock = lockKeyOf(key);
    const h = this.wakeups.take(lock, req.token);
    if (!h) return null;
    const until = h.from + this.cfg.claimMs - driftMs(this.cfg.claimMs);
    if (until - now() <= this.cfg.claimMs / 2) return null;
    this.wakeups.forget(lock, req.token);
    return { fence: BigInt(h.fence), expiresAt: until };
  }

  /** A queue entry: this backend's channel (where its hand-overs are sent) and the token. */
  private member(token: string): string {
    return `${this.wakeups.channel}|${token}`;
  }

  async extend(items: readonly ExtendItem[]): Promise<(boolean | Error)[]> {
    this.assertOpen();
    if (items.length === 0) return [];
    // Redis Cluster: one round trip per master (or per slot on Redis 6); see cluster.ts
    if (this.adapter.cluster)
      return clusterExtend(this.adapter, items, EXTEND_MANY, CHUNK, (ttl) => this.fenceTtl(ttl));
    const all = Array.from(items, (_, i) => i);
    const { calls, order } = renewalCalls(items, all, EXTEND_MANY, CHUNK, (ttl) => this.fenceTtl(ttl));
    const out: boolean[] = new Array(items.length);
    spreadFlags(await this.adapter.run(calls), order, out);
    this.sessions?.extended(items);
    return out;
  }

  /** A held lock's fence counter lives at least as long as the lock (inspect reads it). */
  private fenceTtl(ttlMs: number): number {
    return Math.max(this.cfg.fenceIdleMs, ttlMs);
  }

  async release(key: string, token: string): Promise<boolean> {
    this.sessions?.unbind(token);
    const lock = lockKeyOf(key);
    const [r] = await this.adapter.run([
      {
        script: RELEASE,
        keys: this.adapter.cluster ? declared(lock) : [lock, `${lock}:fence`],
        args: this.adapter.unprefixed
          ? [token, this.cfg.claimMs, this.cfg.fenceIdleMs]
          : [token, this.cfg.claimMs, this.cfg.fenceIdleMs, `${lock}:changed`],
      },
    ]);
    if (r instanceof Error) throw r;
    return Number(r) === 1;
  }

  async leave(key: string, token: string): Promise<void> {
    const k = redisKeys(key);
    this.wakeups.forget(k.lock, token);
    const [r] = await this.adapter.run([
      {
        script: LEAVE,
        keys: [k.q, k.qx, k.lock, k.value, k.fence, k.qv],
        args: [this.member(token), token, k.changed, this.cfg.claimMs, this.cfg.fenceIdleMs],
      },
    ]);
    if (r instanceof Error) throw r;
  }

  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    return this.wakeups.wait(lockKeyOf(key), signal, maxMs);
  }

  /** Calls `onChange` at every grant and release of `key` (pub/sub); an expiry is not pushed. */
  watch(key: string, onChange: () => void): Promise<() => void> {
    return this.watchers.watch(redisKeys(key).changed, onChange);
  }

  async inspect(key: string): Promise<LockInfo | null> {
    this.assertOpen();
    if (this.adapter.cluster) checkClusterKey(this.adapter.keyPrefix, key);
    const k = redisKeys(key);
    const [r] = await this.adapter.run([{ script: INSPECT, keys: [k.lock, k.fence, k.value], args: [] }]);
    if (r instanceof Error) throw r;
    if (!Array.isArray(r)) return null;
    const [fence, pttl, value] = r as [string, number, string | null];
    const info: LockInfo = { key, fence: BigInt(fence), remainingMs: Number(pttl) };
    return value === null || value === undefined ? info : { ...info, value: String(value) };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeups.close();
    this.watchers.close();
    await this.adapter.close();
  }

  /** Neither the client nor its options (a password) print, at any depth. */
  [inspect.custom](): string {
    return `RedisBackend { client: '${this.adapter.kind}'${this.closed ? ', closed' : ''} }`;
  }
  toJSON(): { name: string; client: string } {
    return { name: this.name, client: this.adapter.kind };
  }
}
