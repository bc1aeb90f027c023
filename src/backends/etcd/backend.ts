/**
 * The etcd driver: etcd's own lock algorithm (client/v3/concurrency mutex.go) on the etcd3
 * package's KV, Lease and Watch calls. One transaction creates our entry under the backend's
 * lease if absent and reads the entry just before ours by create revision: none means we hold
 * the lock (an uncontended acquire is one round trip), and our create revision is the fence. A
 * waiter watches only that predecessor (no herd), then tries again, which re-reads its own entry:
 * if its lease died while it waited, the entry is gone and the attempt fails (Jepsen's etcd
 * 3.4.3 finding), it never reports a grant.
 */
import { inspect } from 'node:util';
import type { IKeyValue, IRequestOp, ITxnResponse, Namespace } from 'etcd3';
import type {
  AcquireRequest,
  Backend,
  BackendCapabilities,
  ExtendItem,
  Grant,
  LockInfo,
  LostCallback,
  ResultStore,
} from '../../backend.js';
import { BackendError, ClosedError, InvalidArgumentError } from '../../errors.js';
import { Cutoff } from '../../cutoff.js';
import { Entries, type Entry } from './entries.js';
import { encodeValue, entriesOf, entryKey, resultKey } from './keys.js';
import { againTxn, dropTxn, queueTxn, tryTxn } from './txns.js';
import { Keyspace } from './read.js';
import { Session } from './session.js';
import { Watches } from './watch.js';
import { markTransient } from '../../transient.js';
import { race } from '../../wait.js';

export interface EtcdConfig {
  readonly client: Namespace;
  /** The etcd lease's TTL in ms (whole seconds). */
  readonly leaseTtlMs: number;
}

const isLeaseGone = (e: unknown): boolean =>
  (e as Error)?.name === 'EtcdLeaseInvalidError' || /lease not found/i.test(String((e as Error)?.message));

export class EtcdBackend implements Backend {
  readonly name = 'etcd';
  readonly capabilities: BackendCapabilities = { push: true, fair: true, value: true, results: true, session: true };
  readonly results: ResultStore = {
    get: (lockKey) => this.cutoff.bound(this.keys.value(resultKey(lockKey))),
    put: (lockKey, token, value, ttlMs) => this.cutoff.bound(this.putResult(lockKey, token, value, ttlMs)),
  };
  readonly client: Namespace;
  private readonly keys: Keyspace;
  private readonly watches: Watches;
  private readonly entries: Entries;
  private current: Session | null = null;
  private opening: Promise<Session> | null = null;
  private closed = false;
  /** On fromUrl's own client: once close() began, a server that does not answer is given up. */
  private readonly cutoff = new Cutoff('etcd: closing: the server did not answer (the lease ends by its TTL)');

  constructor(private readonly config: EtcdConfig) {
    this.client = config.client;
    this.keys = new Keyspace(config.client);
    this.watches = new Watches(config.client);
    this.entries = new Entries(config.client, this.keys);
  }

  private raw(key: string): Buffer {
    return this.keys.raw(key);
  }

  /** The session (lease) acquires go under: the current one, or a new one if it died. */
  private async session(): Promise<Session> {
    if (this.current && !this.current.dead) return this.current;
    this.opening ??= Session.open(this.client, this.config.leaseTtlMs)
      .then((s) => {
        if (this.closed) {
          void s.revoke().catch(() => {});
          throw new ClosedError('etcd: backend closed');
        }
        this.current = s;
        s.onDeath((cause) => this.sessionDied(s, cause));
        return s;
      })
      .finally(() => (this.opening = null));
    return this.opening;
  }

  private sessionDied(s: Session, cause: unknown): void {
    if (this.current === s) this.current = null;
    for (const e of [...this.entries.held.values()]) {
      if (e.session !== s) continue;
      this.entries.forget(e);
      this.entries.tell(e, cause);
    }
    // the server may still hold the lease (our watchdog is early by design): free its keys now
    if (!this.closed) void s.revoke().catch(() => {});
  }

  async acquire(key: string, req: AcquireRequest): Promise<Grant | null> {
    this.check(key, req?.token);
    return this.cutoff.bound(this.attempt(key, req));
  }

  private async attempt(key: string, req: AcquireRequest): Promise<Grant | null> {
    const place = this.entries.places.get(req.token);
    if (place) return this.again(place, req);
    for (let tries = 0; ; tries++) {
      const s = await this.session();
      this.assertOpen();
      try {
        return await this.first(s, key, req);
      } catch (e) {
        const gone = isLeaseGone(e);
        if (!gone) this.dropUnheard(key, req.token, s);
        // our lease is gone on the server and we had not noticed: a new session, once
        if (!gone || tries > 0) throw e;
        s.die(e);
      }
    }
  }

  /**
   * A first attempt failed, but its put may have reached etcd with the reply lost for good (etcd3
   * gave up sending it again): the entry it may have left under our live lease — a hold or a
   * queue place nobody would renew, release or leave, blocking the lock until the lease ends — is
   * deleted, by its name (our lease, the token's digest) and only under our lease. The engine's
   * give-back of the token cannot do it: the driver never reported that entry. The same for a
   * release or a leave that failed (it may never have reached etcd), whose entry the driver has
   * forgotten already. The connection that lost the reply is often still down: the delete is
   * tried again, backing off (at most every leaseTtl/3), until it is done, the lease ends (and
   * the entry with it) or we close.
   */
  private dropUnheard(key: string, token: string, s: Session, delayMs = 100): void {
    if (s.dead || !s.id || this.closed) return; // its entries go with its lease
    this.client.kv.txn(dropTxn(this.raw(entryKey(key, s.id, token)), s.id)).catch(() => {
      const next = Math.min(delayMs * 2, Math.floor(this.config.leaseTtlMs / 3));
      setTimeout(() => this.dropUnheard(key, token, s, next), delayMs).unref();
    });
  }

  /** A first attempt: our entry is created, with the entry just before it read in the same txn. */
  private async first(s: Session, key: string, req: AcquireRequest): Promise<Grant | null> {
    const etcdKey = entryKey(key, s.id, req.token);
    const me = this.raw(etcdKey);
    const prefix = this.raw(entriesOf(key));
    const put: IRequestOp = {
      request_put: { key: me, value: Buffer.from(encodeValue(req.value)), lease: s.id },
    };
    let r: ITxnResponse;
    if (req.queue) {
      r = await this.client.kv.txn(queueTxn(me, prefix, put));
    } else {
      // tryAcquire never queues. Refused, it reads our own entry and the holder's: etcd3 sends a
      // call again when its reply is lost (UNAVAILABLE), and the first send may have put our entry
      // (the key names our lease and token, so nobody else can have), which then holds the lock —
      // the lowest entry, made when there was none
      r = await this.client.kv.txn(tryTxn(me, prefix, put));
      let rev = r.header.revision;
      if (!r.succeeded) {
        const own = r.responses[0]?.response_range.kvs[0];
        if (!own || own.lease !== s.id) return null;
        rev = own.create_revision;
        const head = r.responses[1]?.response_range.kvs[0];
        if (head?.create_revision !== rev) {
          // cannot happen (ours was made when the lock had no entry), but never leave it behind
          await this.entries.deleteEntry({ key, token: req.token, etcdKey, rev, session: s, timer: null });
          return null;
        }
      }
      const mine: Entry = { key, token: req.token, etcdKey, rev, session: s, timer: null };
      if (s.dead) return this.voided(mine, s);
      return this.entries.granted(mine, req);
    }
    let rev: string;
    let pred: IKeyValue | undefined;
    if (r.succeeded) {
      rev = r.header.revision;
      const kvs = r.responses[1]!.response_range.kvs;
      pred = kvs.find((kv) => kv.create_revision !== rev);
    } else {
      const kv = r.responses[0]!.response_range.kvs[0];
      if (!kv) throw markTransient(new BackendError('etcd: our entry vanished during the acquire'));
      rev = kv.create_revision;
      pred = await this.keys.predecessor(key, rev);
    }
    const entry: Entry = { key, token: req.token, etcdKey, rev, session: s, timer: null };
    if (s.dead) return this.voided(entry, s);
    if (!pred) return this.entries.granted(entry, req);
    return this.entries.refused(entry, pred, r.header.revision);
  }

  /** A later attempt of a queued acquire: our entry must still be there, or our lease died. */
  private async again(place: Entry, req: AcquireRequest): Promise<Grant | null> {
    const me = this.raw(place.etcdKey);
    const prefix = this.raw(entriesOf(place.key));
    const gone = () => {
      this.entries.places.delete(place.token);
      this.entries.preds.delete(place.key);
      // transient: a new attempt queues again under a live lease
      return markTransient(
        new BackendError(
          `etcd: the lease this waiter queued under ended while it waited (${place.session.dead ? 'lost' : 'its entry was deleted'}); it does not hold the lock`,
          { cause: place.session.cause ?? undefined },
        ),
      );
    };
    if (place.session.dead) throw gone();
    const r = await this.client.kv.txn(againTxn(me, prefix, place.rev));
    // the Jepsen case: after waiting, our own entry is re-read; if our lease died, we fail
    if (!r.succeeded || place.session.dead) throw gone();
    const pred = r.responses[0]!.response_range.kvs[0];
    if (!pred) return this.entries.granted(place, req);
    return this.entries.refused(place, pred, r.header.revision);
  }

  /** The session ended while the attempt was in flight: its entry is removed, the attempt fails. */
  private async voided(e: Entry, s: Session): Promise<never> {
    await this.entries.deleteEntry(e).catch(() => {});
    throw new BackendError('etcd: the lease ended during the acquire', { cause: s.cause });
  }

  /**
   * The liveness probe of many leases in one round trip (entries.ts): each entry must still exist
   * with its create revision, under its lease, and that lease must have a confirmed keep-alive.
   */
  extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    return this.cutoff.bound(this.entries.extend(items));
  }

  async release(key: string, token: string): Promise<boolean> {
    this.assertOpen(); // close() revoked our lease: the lock was ended, not found gone
    const e = this.entries.held.get(token);
    if (!e || e.key !== key) return false;
    this.entries.forget(e);
    const deleted = await this.cutoff.bound(this.entries.releaseEntry(e)).catch((err: unknown) => {
      // it may not have reached etcd: forgotten, the entry would hold the lock until our lease ends
      this.dropUnheard(key, token, e.session);
      throw err;
    });
    return deleted && !e.session.dead;
  }

  /** @internal fromUrl made the client (and closes it after close()): see closing(). */
  markOwned(): this {
    this.cutoff.owned = true;
    return this;
  }

  /**
   * The engine's close begins (releases follow). On a client of our own the lease is revoked at
   * close(), or, with the server out of reach, ends by its TTL as no keep-alive follows: a call
   * (one in flight too: an acquire, a leave, a renewal) that the server does not answer within
   * CLOSE_GRACE_MS of now gives it up, and no later call waits for it (src/cutoff.ts). A caller's
   * client is left alone (its calls wait as any call: the engine bounds them).
   */
  closing(): void {
    if (!this.closed) this.cutoff.begin();
  }

  /** A waiter that gave up removes its entry (its successor then watches the one before it). */
  async leave(key: string, token: string): Promise<void> {
    const e = this.entries.places.get(token);
    if (!e || e.key !== key) return;
    this.entries.places.delete(token);
    if (this.entries.preds.has(key)) this.entries.preds.delete(key);
    await this.cutoff.bound(this.entries.deleteEntry(e)).catch((err: unknown) => {
      // it may not have reached etcd: forgotten, the entry would hold the lock once it is the oldest
      this.dropUnheard(key, token, e.session);
      throw err;
    });
  }

  /**
   * Hands a held lock over to a lease of its own with TTL `ms` (rounded up to whole seconds, or
   * etcd's minimum): it survives `close()` (which revokes the backend's lease) and a crash, and
   * is deleted after exactly `ms` while this process runs (runExclusive's lockAtLeastFor).
   */
  async keep(key: string, token: string, ms: number): Promise<boolean> {
    const e = this.entries.held.get(token);
    if (!e || e.key !== key || !e.session.alive) return false;
    const id = await this.keys.putUnderOwnLease(e, { key: e.etcdKey }, ms);
    if (id === null) return false;
    this.entries.forget(e);
    const timer = setTimeout(() => void this.entries.deleteEntry(e, id).catch(() => {}), ms);
    timer.unref();
    return true;
  }

  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    return this.watches.waitFor(this.entries.preds.get(key), signal, maxMs);
  }

  watch(key: string, onChange: () => void): Promise<() => void> {
    this.assertOpen();
    return this.cutoff.bound(this.watches.watch(key, onChange));
  }

  inspect(key: string): Promise<LockInfo | null> {
    this.assertOpen();
    return this.cutoff.bound(this.keys.inspect(key));
  }

  list(prefix: string): AsyncIterable<LockInfo> {
    this.assertOpen();
    return this.keys.list(prefix);
  }

  forceRelease(key: string): Promise<LockInfo | null> {
    this.assertOpen();
    return this.cutoff.bound(this.keys.forceRelease(key));
  }

  private async putResult(lockKey: string, token: string, value: string, ttlMs: number): Promise<boolean> {
    const e = this.entries.held.get(token);
    if (!e || e.key !== lockKey || !e.session.alive) return false;
    return (await this.keys.putUnderOwnLease(e, { key: resultKey(lockKey), value }, ttlMs)) !== null;
  }

  /** The etcd key and fence of a lease this backend holds (for guarded writes), else null. */
  entryOf(token: string): { etcdKey: string; fence: bigint } | null {
    const e = this.entries.held.get(token);
    return e ? { etcdKey: e.etcdKey, fence: BigInt(e.rev) } : null;
  }

  /**
   * A held lock is valid no longer than its etcd lease is confirmed: a lock's `ttl` may be longer
   * than `leaseTtl`, but etcd frees the lock `leaseTtl` after the last keep-alive it received.
   */
  validUntil(key: string, token: string): number | undefined {
    const e = this.entries.held.get(token);
    return e && e.key === key ? e.session.validUntil : undefined;
  }

  onLost(cb: LostCallback): void {
    if (typeof cb !== 'function') throw new InvalidArgumentError('onLost: callback must be a function');
    this.entries.lost.add(cb);
  }

  /** Revokes the backend's lease: every lock and queue place under it goes at once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.entries.clear();
    this.watches.close();
    // An etcd out of reach cannot revoke (nor grant): the lease then ends by its TTL, so there
    // is no point waiting longer than leaseTtl for either.
    const until = performance.now() + this.config.leaseTtlMs;
    const left = () => Math.max(0, until - performance.now());
    const opening = this.opening;
    const s =
      this.current ?? (opening ? await this.cutoff.bound(race(opening, { ms: left() })).catch(() => null) : null);
    this.current = null;
    if (s) await this.cutoff.bound(race(s.revoke(), { ms: left() })).catch(() => {});
    // a grant still under way when the bound passed: its lease is revoked when it comes (session())
  }

  private check(key: string, token: unknown): void {
    if (typeof key !== 'string' || key.length === 0)
      throw new InvalidArgumentError('etcd: key must be a non-empty string');
    if (typeof token !== 'string' || token.length === 0)
      throw new InvalidArgumentError('etcd: token must be a non-empty string');
    this.assertOpen();
  }

  private assertOpen(): void {
    if (this.closed) throw new ClosedError('etcd: backend closed');
  }

  /** Neither the client nor its options (a password) print, at any depth; never a token. */
  [inspect.custom](): string {
    return `EtcdBackend { held: ${this.entries.held.size}${this.closed ? ', closed' : ''} }`;
  }
  toJSON(): { name: string; held: number } {
    return { name: this.name, held: this.entries.held.size };
  }
}
