/**
 * Run a function once per idempotency key. A lock on `idem:<key>` serialises concurrent callers
 * (renewed while the function runs, released by TTL if its process dies); the result is stored
 * beside that lock, token-checked, so a holder that lost its lease cannot store a result; repeats
 * read the stored result without running the function again.
 */
import type { ResultStore } from '../backend.js';
import { toMs, type Duration } from '../duration.js';
import { InvalidArgumentError, LeaseholdError, LeaseLostError } from '../errors.js';
import type { Lease } from '../lease.js';
import { checkKey, checkOptions } from '../validate.js';

export interface IdempotentOptions {
  /** How long the result is kept (default 24h). */
  ttl?: Duration;
  /** How long a repeat waits for a run in progress (default: the Locks' wait). */
  wait?: Duration;
  signal?: AbortSignal;
}

export interface IdempotencyHost {
  readonly backend: { readonly name: string; readonly results?: ResultStore };
  withLock<T>(
    key: string,
    fn: (lease: Lease) => Promise<T> | T,
    options?: { wait?: Duration; signal?: AbortSignal },
  ): Promise<T>;
  fullKey(key: string): string;
}

const decode = (s: string): unknown => (JSON.parse(s) as { v?: unknown }).v;

export async function idempotent<T>(
  host: IdempotencyHost,
  key: string,
  fn: (lease: Lease) => Promise<T> | T,
  options?: IdempotentOptions,
): Promise<T> {
  checkKey(key);
  if (typeof fn !== 'function') throw new InvalidArgumentError('idempotent: fn must be a function');
  const o = checkOptions<IdempotentOptions>(options, ['ttl', 'wait', 'signal'], 'idempotent');
  const ttlMs = o.ttl === undefined ? 86_400_000 : toMs(o.ttl, 'ttl');
  const store = host.backend.results;
  if (!store) {
    throw new LeaseholdError(
      'LEASEHOLD_UNSUPPORTED',
      `the ${host.backend.name} backend has no result store for idempotency`,
    );
  }
  const lockKey = `idem:${key}`;
  const full = host.fullKey(lockKey);
  const done = await store.get(full);
  if (done !== null) return decode(done) as T;
  const lockOpts: { wait?: Duration; signal?: AbortSignal } = {};
  if (o.wait !== undefined) lockOpts.wait = o.wait;
  if (o.signal !== undefined) lockOpts.signal = o.signal;
  return host.withLock(
    lockKey,
    async (lease) => {
      const stored = await store.get(full); // a run that finished while we waited
      if (stored !== null) return decode(stored) as T;
      const value = await fn(lease);
      let encoded: string;
      try {
        encoded = JSON.stringify({ v: value });
      } catch (e) {
        throw new InvalidArgumentError(
          `idempotent: the result of "${key}" is not JSON-serialisable: ${(e as Error).message}`,
        );
      }
      if (!(await store.put(full, lease.token, encoded, ttlMs))) {
        throw new LeaseLostError(key, 'the lease ended before the result could be stored');
      }
      return value;
    },
    lockOpts,
  );
}
