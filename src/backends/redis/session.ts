/**
 * Session mode of the Redis backend (RedisOptions.session): renewed leases hang off one session
 * key per TTL, and a renewal tick renews those keys, plus the long PX of the few locks whose
 * refresh is due, in one round trip. RedisBackend (index.ts) delegates its session work here.
 */
import { randomBytes } from 'node:crypto';
import type { ExtendItem, LostCallback, SessionRenewal } from '../../backend.js';
import { BackendError } from '../../errors.js';
import { warn } from '../../events.js';
import { driftMs } from '../../lease.js';
import { now } from '../../wait.js';
import type { RedisAdapter, ScriptCall } from './client.js';
import { CHUNK } from './keys.js';
import { EVICTION, REFRESH_MANY, RENEW_SESSION } from './session-scripts.js';

/**
 * Session mode: the PX of a lock that hangs off a session, at least (3 × its TTL if longer). It
 * only bounds how long the key of a dead session's lock lingers (it is free from the moment the
 * session lapsed); the holder refreshes it after a third of it, a few leases per tick.
 */
const LOCK_PX_MIN = 600_000;

/** One session key of a backend (one per TTL): its leases' locks are held while it lives. */
export interface Session {
  readonly key: string;
  readonly ttlMs: number;
  /**
   * A reply about it came back: its key was created (by its creator, the one acquire that may
   * create it), and is never created again (a lapsed one stays dead).
   */
  confirmed: boolean;
  /** While its creator's acquire is in flight: settles with that reply (every other acquire waits). */
  creating: Promise<void> | null;
  /** Settles `creating`. */
  settle: (() => void) | null;
  /** Monotonic time until which the key lives for sure (its last renewal's send time + TTL - drift). */
  validUntil: number;
  dead: boolean;
  /** Tokens of its leases that are no longer held (a rare refresh found the lock changed). */
  lost: string[];
}

/** A lease that hangs off a session: when its lock's long PX is due for a refresh. */
interface Binding {
  readonly key: string;
  readonly token: string;
  readonly session: Session;
  /** Its lock's long PX (lockPx of its session's TTL): the refresh order it is kept in. */
  readonly px: number;
  /** Monotonic time the refresh is due: a third of the PX after the last confirmed one was sent. */
  refreshAt: number;
  /**
   * Monotonic time until which the lock's long PX lives for sure: the last confirmed refresh's
   * (or the grant's) send time + the PX - drift. Past it the lease is lost, whatever its session.
   */
  validTo: number;
}

/** A session-mode backend's sessions and the leases that hang off them. */
export class Sessions {
  /** The current session of each TTL, every session by key, leases by token. */
  private readonly current = new Map<number, Session>();
  private readonly sessions = new Map<string, Session>();
  private readonly bound = new Map<string, Binding>();
  /**
   * The same leases by their lock's PX, each in grant (or refresh) order, which is the order their
   * refreshes come due only among locks of one PX: a lock of a long TTL (a longer PX, refreshed
   * later) must not hold back the refresh of the shorter-PX locks granted after it.
   */
  private readonly byPx = new Map<number, Map<string, Binding>>();
  /**
   * Every Locks on this backend (`onLost`): a lost lease is reported to all of them (each looks
   * up its own), since two Locks on one backend share its sessions, and the one whose renewal
   * reads a session's `:lost` set may not hold the lease.
   */
  private readonly lostCbs = new Set<LostCallback>();
  /**
   * Sessions one of whose locks a refresh found changed (evicted, deleted, overwritten): the next
   * renewal refreshes every lock of theirs, due or not (what removed one may have removed others).
   */
  private readonly suspect = new Set<Session>();
  /** The server's eviction settings were checked and said (or found safe): not again. */
  private evictionChecked = false;

  /**
   * `lockPxMinMs`: RedisConfig.lockPxMinMs (LOCK_PX_MIN when absent); `fenceTtl`: the backend's
   * (a held lock's fence counter lives at least as long as the lock).
   */
  constructor(
    private readonly adapter: RedisAdapter,
    private readonly lockPxMinMs: number | undefined,
    private readonly fenceTtl: (ttlMs: number) => number,
  ) {}

  /** The PX of a lock that hangs off a session of `ttlMs` (LOCK_PX_MIN, or 3 × ttl). */
  lockPx(ttlMs: number): number {
    return Math.max(this.lockPxMinMs ?? LOCK_PX_MIN, 3 * ttlMs);
  }

  /** The live session for leases of `ttlMs` (a new one once the last lapsed by our clock). */
  session(ttlMs: number): Session {
    let s = this.current.get(ttlMs);
    if (s && !s.dead && (!s.confirmed || now() < s.validUntil)) return s;
    if (s) this.ended(s);
    s = {
      key: `leasehold-session:${randomBytes(16).toString('base64url')}:${ttlMs}`,
      ttlMs,
      confirmed: false,
      creating: null,
      settle: null,
      validUntil: -Infinity,
      dead: false,
      lost: [],
    };
    this.current.set(ttlMs, s);
    this.sessions.set(s.key, s);
    if (!this.evictionChecked) void this.checkEviction();
    if (this.current.size >= this.sweepAt) this.sweep();
    return s;
  }

  /** `current` holds this many sessions: `sweep` runs (then twice as many as it left). */
  private sweepAt = 16;

  /**
   * Ends every session past its expiry by our clock (as `session` would at its next use): one per
   * TTL was kept forever, and jittered TTLs made thousands. Run as `current` doubles: amortised
   * O(1) per new session.
   */
  private sweep(): void {
    const t = now();
    for (const s of [...this.current.values()]) if (s.confirmed && !s.creating && t >= s.validUntil) this.ended(s);
    this.sweepAt = Math.max(16, 2 * this.current.size);
  }

  /**
   * At a new session: a server that may evict keys (a `maxmemory` with any policy but
   * `noeviction`) is said once, as the warning LEASEHOLD_REDIS_EVICTION: it may evict a lock key
   * of a live session (touched only at its rare refresh), and that holder hears of it only at that
   * refresh (docs/redis.md, "Eviction"). Off the acquire path; an error (INFO refused, a
   * connection down) says nothing, and the next new session checks again.
   */
  private async checkEviction(): Promise<void> {
    this.evictionChecked = true;
    try {
      const [r] = await this.adapter.run([{ script: EVICTION, keys: [], args: [] }]);
      if (!Array.isArray(r)) throw new Error('no reply');
      const [max, policy] = r.map(String) as [string, string];
      if (Number(max) === 0 || policy === 'noeviction') return;
      const heard = warn({
        code: 'LEASEHOLD_REDIS_EVICTION',
        message:
          `redis session mode on a server that evicts keys (maxmemory ${max}, maxmemory-policy ${policy}): ` +
          "an evicted session key frees all of its process's locks, and an evicted lock key is noticed only " +
          'at its refresh (up to a third of its PX, 200 s by default) while another process may take it; ' +
          'use maxmemory-policy noeviction',
      });
      if (!heard) this.evictionChecked = false; // nobody listened: said again at a later session
    } catch {
      this.evictionChecked = false;
    }
  }

  /**
   * True when the caller's acquire is to create `s`'s key (create=1): `s` is new and nobody
   * creates it yet. The caller then reports the outcome with `created`; other acquires of `s`
   * wait for `s.creating` meanwhile. One creation per session: an acquire sent later cannot
   * bring back a key that existed and lapsed (eviction, a DEL) while a lease named it.
   */
  create(s: Session): boolean {
    if (s.confirmed || s.creating) return false;
    s.creating = new Promise<void>((resolve) => (s.settle = resolve));
    return true;
  }

  /** The creator's acquire of `s` is over: with a reply (the key exists), or not (`s` is ended). */
  created(s: Session, replied: boolean): void {
    if (!replied) this.ended(s);
    const settle = s.settle;
    s.creating = null;
    s.settle = null;
    settle?.();
  }

  /**
   * A session that lapsed (or may have): its key is never renewed or created again, and every
   * lease that hangs off it is reported lost at once (not at its next renewal).
   */
  ended(s: Session): void {
    if (s.dead) return;
    s.dead = true;
    if (this.current.get(s.ttlMs) === s) this.current.delete(s.ttlMs);
    this.sessions.delete(s.key);
    if (this.lostCbs.size === 0) return;
    const gone: Binding[] = [];
    for (const b of this.bound.values()) if (b.session === s) gone.push(b);
    for (const b of gone) this.lost(b, 'redis: its session key lapsed (not renewed in time, evicted or deleted)');
  }

  /** Registers a Locks' lost-lease callback (Backend.onLost). */
  onLost(cb: LostCallback): void {
    this.lostCbs.add(cb);
  }

  /** Binds `b` (at the end of its PX's refresh order). */
  private put(b: Binding): void {
    this.bound.set(b.token, b);
    let q = this.byPx.get(b.px);
    if (!q) this.byPx.set(b.px, (q = new Map()));
    q.set(b.token, b);
  }

  /** Unbinds the lease `token`, whatever its binding. */
  private drop(token: string): void {
    const b = this.bound.get(token);
    if (!b) return;
    this.bound.delete(token);
    const q = this.byPx.get(b.px);
    if (q?.get(token) !== b) return;
    q.delete(token);
    if (q.size === 0) this.byPx.delete(b.px);
  }

  /** The lease of `b` is no longer held: unbound, and told to every Locks (onLost). */
  private lost(b: Binding, why: string): void {
    if (this.bound.get(b.token) === b) this.drop(b.token);
    if (this.lostCbs.size === 0) return;
    const cause = new BackendError(why);
    for (const cb of this.lostCbs) cb(b.key, b.token, cause);
  }

  /** An acquire naming `s`, sent at `sentAt`, had its reply (not 'gone'): the key lives for sure till then + TTL. */
  confirm(s: Session, sentAt: number): void {
    if (s.dead) return;
    s.confirmed = true;
    s.validUntil = Math.max(s.validUntil, sentAt + s.ttlMs - driftMs(s.ttlMs));
  }

  /** The lease `token` of `key` was granted on `s` by an acquire sent at `sentAt`: it hangs off `s`. */
  bind(key: string, token: string, s: Session, sentAt: number): void {
    this.drop(token);
    const px = this.lockPx(s.ttlMs);
    this.put({ key, token, session: s, px, refreshAt: sentAt + px / 3, validTo: sentAt + px - driftMs(px) });
  }

  /** A lease released: no longer bound. */
  unbind(token: string): void {
    this.drop(token);
  }

  /** Leases extended by themselves: no longer bound. */
  extended(items: readonly ExtendItem[]): void {
    // a lease extended by itself has left its session (or was lost)
    if (this.bound.size > 0) for (const { token } of items) this.drop(token);
  }

  /** A lease that hangs off a session is valid only while its lock's long PX surely lives. */
  validUntil(key: string, token: string): number | undefined {
    const b = this.bound.get(token);
    return b?.key === key ? b.validTo : undefined;
  }

  /**
   * Renews `ids` (one RENEW_SESSION each) and refreshes the long PX of the locks whose refresh
   * is due (a few per tick), all in one pipeline: one round trip per tick. A refresh counts only
   * once its reply came back: after a failed round trip it is still due, and the next tick sends
   * it again. A lock whose PX may have run out (no refresh confirmed for its PX minus drift) is
   * lost, reported with its session's next renewal.
   */
  async renew(ids: readonly string[]): Promise<SessionRenewal[]> {
    const calls: ScriptCall[] = [];
    const live: (Session | null)[] = ids.map((id) => {
      const s = this.sessions.get(id);
      if (!s || s.dead) return null;
      calls.push({ script: RENEW_SESSION, keys: [s.key, `${s.key}:lost`], args: [s.ttlMs] });
      return s;
    });
    const t = now();
    const due: Binding[] = [];
    for (const q of this.byPx.values()) {
      for (const b of q.values()) {
        if (b.refreshAt > t) break; // grant (or refresh) order within one PX: the rest are due later
        due.push(b);
      }
    }
    if (this.suspect.size > 0) {
      // every lock of a suspect session, due or not (the due ones are at the head, taken above)
      for (const b of this.bound.values()) if (b.refreshAt > t && this.suspect.has(b.session)) due.push(b);
      this.suspect.clear();
    }
    const refresh: Binding[] = [];
    for (const b of due) {
      if (b.session.dead) this.drop(b.token);
      else if (t >= b.validTo) {
        // no refresh confirmed in time: the lock's PX may have run out while its session lived
        b.session.lost.push(b.token);
        this.lost(b, "redis: its lock's PX may have run out (no refresh confirmed in time)");
      } else refresh.push(b);
    }
    // the lock's value names the session key as ACQUIRE stored it: with the client's keyPrefix
    const kp = this.adapter.keyPrefix;
    for (let i = 0; i < refresh.length; i += CHUNK) {
      const keys: string[] = [];
      const args: (string | number)[] = [];
      for (const b of refresh.slice(i, i + CHUNK)) {
        const k = `{${b.key}}`;
        keys.push(k, `${k}:v`, `${k}:fence`);
        args.push(`${b.token}|${kp}${b.session.key}`, b.px, this.fenceTtl(b.px));
      }
      calls.push({ script: REFRESH_MANY, keys, args });
    }
    const res = calls.length > 0 ? await this.adapter.run(calls) : [];
    for (const r of res) if (r instanceof Error) throw r;
    let c = 0;
    const renewed = live.map((s) => (s ? (res[c++] as unknown[]) : null));
    const flags = this.flags(res.slice(c));
    refresh.forEach((b, i) => {
      // released or extended by itself meanwhile: no longer bound
      if (this.bound.get(b.token) !== b) return;
      if (!flags[i]) {
        b.session.lost.push(b.token);
        this.lost(b, 'redis: its lock was deleted or overwritten from outside (evicted?)');
        if (!b.session.dead) this.suspect.add(b.session);
        return;
      }
      this.drop(b.token);
      // confirmed: due again a third of the PX after this call was sent (the end of its order)
      b.refreshAt = t + b.px / 3;
      b.validTo = Math.max(b.validTo, t + b.px - driftMs(b.px));
      this.put(b);
    });
    return live.map((s, i) => {
      const r = renewed[i];
      if (!s || !Array.isArray(r) || Number(r[0]) !== 1) {
        if (s) this.ended(s);
        return { ok: false, lost: [] };
      }
      if (!s.dead) s.validUntil = Math.max(s.validUntil, t + s.ttlMs - driftMs(s.ttlMs));
      // broken by forceRelease: the `:lost` set is read once, by whichever Locks renewed; every
      // Locks on this backend hears of each token (onLost), the one that holds it loses it
      const broken = r.slice(1).map(String);
      for (const token of broken) {
        const b = this.bound.get(token);
        if (b) this.lost(b, 'redis: its lock was broken from outside (forceRelease)');
      }
      const lost = [...s.lost, ...broken];
      s.lost = [];
      return { ok: true, lost };
    });
  }

  private flags(res: unknown[]): boolean[] {
    const out: boolean[] = [];
    for (const r of res) {
      if (r instanceof Error) throw r;
      if (Array.isArray(r)) for (const x of r) out.push(Number(x) === 1);
      else out.push(Number(r) === 1);
    }
    return out;
  }
}
