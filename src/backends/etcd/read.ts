/**
 * The etcd driver's reads and administration: the holder of a lock (its entry with the lowest
 * create revision), the entry just ahead of a waiter's, `inspect`, `list` (paged), and
 * `forceRelease`. Keys are relative to the client's namespace; `raw` adds it for the KV calls.
 */
import type { IKeyValue, Namespace } from 'etcd3';
import type { LockInfo } from '../../backend.js';
import { BackendError } from '../../errors.js';
import { decodeValue, entriesOf, esc, lockOfEntry, rangeEnd } from './keys.js';

/** Keys per page of `list`. */
const PAGE = 256;

export class Keyspace {
  private readonly ns: Buffer;

  constructor(readonly client: Namespace) {
    this.ns = Buffer.from(client.prefix ?? Buffer.alloc(0));
  }

  /** An etcd key with the client's namespace, as the raw KV calls need it. */
  raw(key: string): Buffer {
    return Buffer.concat([this.ns, Buffer.from(key)]);
  }
  unraw(key: Buffer): string {
    return key.subarray(this.ns.length).toString();
  }

  async predecessor(key: string, rev: string): Promise<IKeyValue | undefined> {
    const prefix = this.raw(entriesOf(key));
    const r = await this.client.kv.range({
      key: prefix,
      range_end: rangeEnd(prefix),
      max_create_revision: String(BigInt(rev) - 1n),
      sort_target: 'Create',
      sort_order: 'Descend',
      limit: 1,
      keys_only: true,
    });
    return r.kvs[0];
  }

  /** The holder of `key`: the entry with the lowest create revision. */
  async owner(key: string): Promise<IKeyValue | undefined> {
    const prefix = this.raw(entriesOf(key));
    const r = await this.client.kv.range({
      key: prefix,
      range_end: rangeEnd(prefix),
      sort_target: 'Create',
      sort_order: 'Ascend',
      limit: 1,
    });
    return r.kvs[0];
  }

  private async remaining(leaseId: string, cache?: Map<string, number>): Promise<number> {
    if (leaseId === '0') return -1;
    const known = cache?.get(leaseId);
    if (known !== undefined) return known;
    const r = await this.client.leaseClient.leaseTimeToLive({ ID: leaseId }).catch(() => null);
    const ms = r && Number(r.TTL) >= 0 ? Number(r.TTL) * 1000 : -1;
    cache?.set(leaseId, ms);
    return ms;
  }

  async info(key: string, kv: IKeyValue, cache?: Map<string, number>): Promise<LockInfo> {
    const info: LockInfo = {
      key,
      fence: BigInt(kv.create_revision),
      remainingMs: await this.remaining(kv.lease, cache),
    };
    const value = decodeValue(kv.value);
    return value === undefined ? info : { ...info, value };
  }

  async inspect(key: string): Promise<LockInfo | null> {
    const kv = await this.owner(key);
    return kv ? this.info(key, kv) : null;
  }

  async *list(prefix: string): AsyncIterable<LockInfo> {
    const start = this.raw(esc(prefix));
    const end = rangeEnd(start);
    let from = start;
    let group: { key: string; owner: IKeyValue } | null = null;
    const cache = new Map<string, number>();
    for (;;) {
      const r = await this.client.kv.range({ key: from, range_end: end, limit: PAGE });
      for (const kv of r.kvs) {
        const lock = lockOfEntry(this.unraw(kv.key));
        if (lock === null || !lock.startsWith(prefix)) continue;
        if (group && group.key !== lock) {
          yield await this.info(group.key, group.owner, cache);
          group = null;
        }
        if (!group) group = { key: lock, owner: kv };
        else if (BigInt(kv.create_revision) < BigInt(group.owner.create_revision)) group.owner = kv;
      }
      if (!r.more || r.kvs.length === 0) break;
      from = Buffer.concat([r.kvs[r.kvs.length - 1]!.key, Buffer.from([0])]);
    }
    if (group) yield await this.info(group.key, group.owner, cache);
  }

  async forceRelease(key: string): Promise<LockInfo | null> {
    for (let i = 0; i < 5; i++) {
      const kv = await this.owner(key);
      if (!kv) return null;
      const info = await this.info(key, kv);
      const r = await this.client.kv.txn({
        compare: [{ key: kv.key, target: 'Create', result: 'Equal', create_revision: kv.create_revision }],
        success: [{ request_delete_range: { key: kv.key } }],
        failure: [],
      });
      if (r.succeeded) return info;
    }
    throw new BackendError(`etcd: the holder of "${key}" kept changing; nothing was broken`);
  }

  /** The value stored at `key`, or null. */
  async value(key: string): Promise<string | null> {
    const r = await this.client.kv.range({ key: this.raw(key) });
    const kv = r.kvs[0];
    return kv ? kv.value.toString() : null;
  }

  /**
   * Under a new lease of TTL `ms` (whole seconds, up; etcd's minimum applies), puts `put.key`
   * — with `put.value`, or keeping its value — in a transaction that commits only while `entry`
   * still has its create revision. Resolves the new lease's id, or null (the lease is revoked).
   */
  async putUnderOwnLease(
    entry: { etcdKey: string; rev: string },
    put: { key: string; value?: string },
    ms: number,
  ): Promise<string | null> {
    const lease = this.client.lease(Math.max(1, Math.ceil(ms / 1000)), { autoKeepAlive: false });
    lease.on('lost', () => {});
    const id = String(await lease.grant());
    const r = await this.client.kv.txn({
      compare: [{ key: this.raw(entry.etcdKey), target: 'Create', result: 'Equal', create_revision: entry.rev }],
      success: [
        {
          request_put:
            put.value === undefined
              ? { key: this.raw(put.key), ignore_value: true, lease: id }
              : { key: this.raw(put.key), value: Buffer.from(put.value), lease: id },
        },
      ],
      failure: [],
    });
    if (r.succeeded) return id;
    void lease.revoke().catch(() => {});
    return null;
  }
}
