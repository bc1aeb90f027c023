/**
 * The entries the etcd driver (backend.ts) knows of: held locks, each with the timer that frees
 * one the engine neither extends nor releases within its TTL; queue places; per key, the
 * predecessor a refused attempt saw; and the listeners told when a held lock is gone. With them,
 * the KV calls on our own entries: the batched liveness probe (`extend`), the delete and the
 * release.
 */
import { randomBytes } from 'node:crypto';
import type { IKeyValue, Namespace } from 'etcd3';
import type { AcquireRequest, ExtendItem, Grant, LostCallback } from '../../backend.js';
import { BackendError } from '../../errors.js';
import { releasedKey } from './keys.js';
import type { Keyspace } from './read.js';
import type { Session } from './session.js';
import { deleteTxn, releaseTxn } from './txns.js';
import type { Pred } from './watch.js';

/** One acquire's entry: held, or waiting in the queue. */
export interface Entry {
  readonly key: string;
  readonly token: string;
  /** The entry's etcd key, relative to the client's namespace. */
  readonly etcdKey: string;
  /** Its create revision: the fence once it holds. */
  readonly rev: string;
  readonly session: Session;
  /** Frees a held lock the engine neither extended nor released within its TTL. */
  timer: NodeJS.Timeout | null;
}

/** etcd's default --max-txn-ops: the most operations one transaction may have. */
const MAX_TXN_OPS = 128;

export class Entries {
  readonly held = new Map<string, Entry>();
  readonly places = new Map<string, Entry>();
  /** Per key: the predecessor our last refused attempt saw, and the revision it saw it at. */
  readonly preds = new Map<string, Pred>();
  readonly lost = new Set<LostCallback>();

  constructor(
    private readonly client: Namespace,
    private readonly keys: Keyspace,
  ) {}

  private raw(key: string): Buffer {
    return this.keys.raw(key);
  }

  /** Tells the engine that the lock of `e` is gone. */
  tell(e: Entry, cause: unknown): void {
    for (const cb of this.lost) {
      try {
        cb(e.key, e.token, cause);
      } catch {
        // a listener's failure must not stop the others
      }
    }
  }

  granted(e: Entry, req: AcquireRequest): Grant {
    this.places.delete(e.token);
    this.preds.delete(e.key);
    this.held.set(e.token, e);
    this.expireAfter(e, req.ttlMs);
    return { fence: BigInt(e.rev) };
  }

  refused(e: Entry, pred: IKeyValue, rev: string): null {
    this.places.set(e.token, e);
    this.preds.set(e.key, { etcdKey: this.keys.unraw(pred.key), rev });
    return null;
  }

  /**
   * A lock neither extended nor released within its TTL is freed by the backend itself, and the
   * engine is told (its own deadline comes first, so normally nobody holds it any more by then).
   */
  private expireAfter(e: Entry, ms: number): void {
    if (e.timer) clearTimeout(e.timer);
    e.timer = setTimeout(
      () => {
        e.timer = null;
        if (this.held.get(e.token) !== e) return;
        this.forget(e);
        void this.deleteEntry(e).catch(() => {});
        this.tell(e, new BackendError('etcd: the lock was neither extended nor released within its TTL; freed'));
      },
      Math.min(ms, 2_147_483_647),
    );
    e.timer.unref();
  }

  forget(e: Entry): void {
    if (e.timer) clearTimeout(e.timer);
    e.timer = null;
    if (this.held.get(e.token) === e) this.held.delete(e.token);
  }

  /** Deletes an entry if it is still the same one (same create revision). */
  async deleteEntry(e: Entry, leaseId = e.session.id): Promise<boolean> {
    const r = await this.client.kv.txn(deleteTxn(this.raw(e.etcdKey), e.rev, leaseId));
    return r.succeeded && Number(r.responses[0]!.response_delete_range.deleted) === 1;
  }

  /**
   * The liveness probe of many leases in one round trip: each entry must still exist with its
   * create revision, under its lease, and that lease must have a confirmed keep-alive.
   */
  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    const out = items.map(() => false);
    const probe: { e: Entry; i: number }[] = [];
    items.forEach((it, i) => {
      const e = this.held.get(it.token);
      if (e && e.key === it.key && e.session.alive) probe.push({ e, i });
    });
    if (probe.length === 0) return out;
    const sentAt = performance.now();
    // etcd refuses a transaction of more than --max-txn-ops (128 by default) operations
    const chunks: (typeof probe)[] = [];
    for (let i = 0; i < probe.length; i += MAX_TXN_OPS) chunks.push(probe.slice(i, i + MAX_TXN_OPS));
    const answers = await Promise.all(
      chunks.map((chunk) =>
        this.client.kv.txn({
          compare: [],
          success: chunk.map(({ e }) => ({ request_range: { key: this.raw(e.etcdKey) } })),
          failure: [],
        }),
      ),
    );
    chunks.forEach((chunk, c) => {
      chunk.forEach(({ e, i }, j) => {
        const kv = answers[c]!.responses[j]?.response_range.kvs[0];
        const ok = !!kv && kv.create_revision === e.rev && kv.lease === e.session.id && !e.session.dead;
        out[i] = ok;
        if (ok) this.expireAfter(e, Math.max(1, items[i]!.ttlMs - (performance.now() - sentAt)));
      });
    });
    return out;
  }

  /**
   * Deletes a held entry (same create revision, same lease) and, in the same transaction, writes
   * a nonce of this release to the lease's `releasedKey`. Refused, the transaction reads that key
   * back: etcd3 sends a call again when its reply is lost, and if the first send deleted our entry
   * the nonce is there — the lock was ours until this release. (A delete by anyone else leaves no
   * such proof: then, or if another release of this lease rewrote the key meanwhile, false.)
   */
  async releaseEntry(e: Entry): Promise<boolean> {
    const proof = this.raw(releasedKey(e.session.id));
    const nonce = randomBytes(12).toString('base64url');
    const r = await this.client.kv.txn(releaseTxn(this.raw(e.etcdKey), e.rev, e.session.id, proof, nonce));
    if (r.succeeded) return Number(r.responses[0]!.response_delete_range.deleted) === 1;
    return r.responses[0]?.response_range.kvs[0]?.value.toString() === nonce;
  }

  /** Forgets every entry (close: the backend's lease goes, and they with it). */
  clear(): void {
    for (const e of this.held.values()) if (e.timer) clearTimeout(e.timer);
    this.held.clear();
    this.places.clear();
    this.preds.clear();
  }
}
