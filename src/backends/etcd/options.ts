/**
 * The etcd backend's options, checked the same way from `etcd(client, options)` and from an
 * `etcd://` URL's query (before fromUrl makes a client or connects).
 */
import { toMs, type Duration } from '../../duration.js';
import { InvalidArgumentError } from '../../errors.js';

/** `leaseTtl` in ms: default 10 s, at least 2 s (etcd raises shorter leases), rounded up to whole seconds. */
export function leaseTtlMs(value: Duration | undefined, name = 'etcd: leaseTtl'): number {
  const ms = value === undefined ? 10_000 : toMs(value, name);
  if (ms < 2000) throw new InvalidArgumentError(`${name} must be at least 2s (etcd raises shorter leases)`);
  return Math.ceil(ms / 1000) * 1000;
}
