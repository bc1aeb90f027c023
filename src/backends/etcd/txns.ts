/**
 * The transactions of the etcd driver (backend.ts, entries.ts), as etcd3 request objects.
 * Keys are raw (namespaced) buffers. Every one of them may be sent twice: etcd3 sends a call
 * again when its reply is lost (UNAVAILABLE), so each reads, on its refused branch, what tells a
 * retry apart from a real refusal.
 */
import type { IRequestOp, ITxnRequest } from 'etcd3';
import { rangeEnd } from './keys.js';

/** The entries of a lock (keys only), by create revision. */
function entries(prefix: Buffer, order: 'Ascend' | 'Descend', limit: number, maxCreateRevision?: string): IRequestOp {
  return {
    request_range: {
      key: prefix,
      range_end: rangeEnd(prefix),
      ...(maxCreateRevision === undefined ? {} : { max_create_revision: maxCreateRevision }),
      sort_target: 'Create',
      sort_order: order,
      limit,
      keys_only: true,
    },
  };
}

/**
 * mutex.go: put our entry if absent, and read the two newest entries (ours and our
 * predecessor). Refused (our entry exists: a retry), it reads our entry back.
 */
export const queueTxn = (me: Buffer, prefix: Buffer, put: IRequestOp): ITxnRequest => ({
  compare: [{ key: me, target: 'Create', result: 'Equal', create_revision: 0 }],
  success: [put, entries(prefix, 'Descend', 2)],
  failure: [{ request_range: { key: me } }],
});

/**
 * tryAcquire: put our entry only when the lock has no entry at all. Refused, it reads our own
 * entry and the lock's first: a retry whose first send put ours finds it there, holding.
 */
export const tryTxn = (me: Buffer, prefix: Buffer, put: IRequestOp): ITxnRequest => ({
  compare: [{ key: prefix, range_end: rangeEnd(prefix), target: 'Create', result: 'Equal', create_revision: 0 }],
  success: [put],
  failure: [{ request_range: { key: me } }, entries(prefix, 'Ascend', 1)],
});

/** After waiting: our entry must still have its create revision; read the entry just before it. */
export const againTxn = (me: Buffer, prefix: Buffer, rev: string): ITxnRequest => ({
  compare: [{ key: me, target: 'Create', result: 'Equal', create_revision: rev }],
  success: [entries(prefix, 'Descend', 1, String(BigInt(rev) - 1n))],
  failure: [],
});

/** Deletes an entry if it is still the same one (same create revision, same lease). */
export const deleteTxn = (me: Buffer, rev: string, leaseId: string): ITxnRequest => ({
  compare: [
    { key: me, target: 'Create', result: 'Equal', create_revision: rev },
    { key: me, target: 'Lease', result: 'Equal', lease: leaseId },
  ],
  success: [{ request_delete_range: { key: me } }],
  failure: [],
});

/** Deletes an entry that may exist, only if it is under our lease (an attempt's, never heard). */
export const dropTxn = (me: Buffer, leaseId: string): ITxnRequest => ({
  compare: [{ key: me, target: 'Lease', result: 'Equal', lease: leaseId }],
  success: [{ request_delete_range: { key: me } }],
  failure: [],
});

/**
 * A release: `deleteTxn`, which also writes `nonce` to the lease's proof key (keys.releasedKey);
 * refused, it reads that key back: our nonce there means our first send deleted the entry.
 */
export const releaseTxn = (me: Buffer, rev: string, leaseId: string, proof: Buffer, nonce: string): ITxnRequest => {
  const t = deleteTxn(me, rev, leaseId);
  return {
    ...t,
    success: [...t.success!, { request_put: { key: proof, value: Buffer.from(nonce), lease: leaseId } }],
    failure: [{ request_range: { key: proof } }],
  };
};
