/**
 * `leasehold/etcd`: locks, fences and elections on etcd, with etcd's own lock algorithm
 * (client/v3/concurrency mutex.go) over the `etcd3` package's KV, Lease, Watch and transactions
 * (never its `Lock`). One etcd lease per backend (per Locks) keeps every lock and queue place
 * alive; the fence is the lock entry's create revision. See docs/etcd.md.
 */
import type { ComparatorBuilder, Namespace } from 'etcd3';
import type { Duration } from '../../duration.js';
import { InvalidArgumentError, LeaseLostError } from '../../errors.js';
import type { Lease } from '../../lease.js';
import { checkOptions } from '../../validate.js';
import { EtcdBackend } from './backend.js';
import { leaseTtlMs } from './options.js';

export { EtcdBackend } from './backend.js';

export interface EtcdOptions {
  /**
   * The TTL of the backend's etcd lease (default `'10s'`; whole seconds, at least 2s — etcd's
   * own minimum): how long a crashed or partitioned process keeps its locks before etcd frees
   * them. The client keeps it alive every TTL/3; a keep-alive not confirmed within the TTL marks
   * every lock held under it lost. A lock's `ttl` is its holder's validity, but never past the
   * etcd lease's last confirmed expiry (a `ttl` longer than `leaseTtl` is cut to it): renewal
   * (every ttl/3) checks that the lock's entry still exists under the live lease.
   */
  leaseTtl?: Duration;
}

const isClient = (x: unknown): x is Namespace => {
  const c = x as Record<string, unknown> | null;
  return !!c && typeof c === 'object' && typeof c.lease === 'function' && typeof c.watch === 'function' && !!c.kv;
};

/** A backend over an etcd cluster, through the caller's `etcd3` client (never closed by us). */
export function etcd(client: Namespace, options?: EtcdOptions): EtcdBackend {
  if (!isClient(client))
    throw new InvalidArgumentError('etcd(client): client must be an etcd3 client (Etcd3, or one of its namespaces)');
  const o = checkOptions<EtcdOptions>(options, ['leaseTtl'], 'etcd');
  return new EtcdBackend({ client, leaseTtlMs: leaseTtlMs(o.leaseTtl) });
}

/**
 * etcd's `IsOwner()`: a transaction on the backend's client that commits only while `lease`
 * still holds its lock (a compare on the lock entry's create revision, which is the fence). Add
 * the writes with `.then(...)` and check `succeeded` of `.commit()`:
 *
 *     const r = await ownerTxn(backend, lease).then(client.put('config').value(v)).commit();
 *     if (!r.succeeded) throw new Error('no longer the holder');
 *
 * Throws LeaseLostError if this backend no longer holds `lease` (InvalidArgumentError if it is
 * not a lease at all).
 */
export function ownerTxn(backend: EtcdBackend, lease: Lease): ComparatorBuilder {
  // not only `instanceof`: an etcd() backend from leasehold's other build (ESM or CommonJS) is one too
  const b = backend as Partial<EtcdBackend> | null;
  if (!(backend instanceof EtcdBackend) && !(typeof b?.entryOf === 'function' && typeof b.client?.if === 'function'))
    throw new InvalidArgumentError('ownerTxn: backend must be an etcd() backend');
  const l = lease as Partial<Lease> | null;
  if (!l || typeof l !== 'object' || typeof l.token !== 'string' || typeof l.fence !== 'bigint')
    throw new InvalidArgumentError('ownerTxn: lease must be a Lease from acquire()');
  const entry = backend.entryOf(lease.token);
  if (!entry || entry.fence !== lease.fence || !lease.held) {
    throw new LeaseLostError(String(lease?.key), 'this backend no longer holds the lease');
  }
  return backend.client.if(entry.etcdKey, 'Create', '==', entry.fence.toString());
}
