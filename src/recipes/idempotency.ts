/**
 * Run a function once per idempotency key. A lock on `idem:<key>` serialises concurrent callers
 * (renewed while the function runs, released by TTL if its process dies); the result is stored
 * beside that lock, token-checked, so a holder that lost its lease cannot store a result; repeats
 * read the stored result without running the function again.
 *
 * What is stored: a small JSON record. `{"v": …}` holds the result in the codec of codec.ts
 * (JSON plus bigint, Date, Map, Set, bytes, undefined, NaN, ±Infinity); `{"s": "…"}` the string
 * of a user's `serialize`; `{"x": "…"}` says the function ran but its result could not be
 * stored. The function never runs twice because its result could not be stored: the record is
 * written in every case, and repeats then fail with LEASEHOLD_UNSERIALIZABLE instead of running.
 */
import type { ResultStore } from '../backend.js';
import { toMs, type Duration } from '../duration.js';
import { InvalidArgumentError, LeaseholdError, LeaseLostError } from '../errors.js';
import type { Lease } from '../lease.js';
import { checkOptions, checkSignal, checkTaggedKey } from '../validate.js';
import { encode, revive } from './codec.js';

export interface IdempotentOptions {
  /** How long the result is kept (default 24h). */
  ttl?: Duration;
  /** How long a repeat waits for a run in progress (default: the Locks' wait). */
  wait?: Duration;
  signal?: AbortSignal;
  /** Turns the result into the stored string (default: JSON that keeps bigint, Date, Map, Set, …). */
  serialize?: (value: unknown) => string;
  /** Turns the stored string back into the result (pairs with `serialize`). */
  deserialize?: (stored: string) => unknown;
}

export interface IdempotencyHost {
  readonly backend: { readonly name: string };
  /** The backend's result store (bounded calls), if it has one. */
  readonly results: ResultStore | undefined;
  withLock<T>(
    key: string,
    fn: (lease: Lease) => Promise<T> | T,
    options?: { wait?: Duration; signal?: AbortSignal; renew?: boolean },
  ): Promise<T>;
  fullKey(key: string): string;
}

/** The function ran, but its result cannot be stored (or read back). */
export class UnserializableError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('LEASEHOLD_UNSERIALIZABLE', message, options);
  }
}

const OPTIONS = ['ttl', 'wait', 'signal', 'serialize', 'deserialize'];

export async function idempotent<T>(
  host: IdempotencyHost,
  key: string,
  fn: (lease: Lease) => Promise<T> | T,
  options?: IdempotentOptions,
): Promise<T> {
  checkTaggedKey(key, 'idem:', 'key');
  if (typeof fn !== 'function') throw new InvalidArgumentError('idempotent: fn must be a function');
  const o = checkOptions<IdempotentOptions>(options, OPTIONS, 'idempotent');
  const ttlMs = o.ttl === undefined ? 86_400_000 : toMs(o.ttl, 'ttl');
  // withLock checks these too, but only after the first read of the store: bad input, no I/O
  if (o.wait !== undefined) toMs(o.wait, 'wait', { allowZero: true });
  checkSignal(o.signal, 'idempotent');
  for (const f of ['serialize', 'deserialize'] as const) {
    if (o[f] !== undefined && typeof o[f] !== 'function')
      throw new InvalidArgumentError(`idempotent: ${f} must be a function`);
  }
  if ((o.serialize === undefined) !== (o.deserialize === undefined))
    throw new InvalidArgumentError('idempotent: serialize and deserialize go together');
  const store = host.results;
  if (!store) {
    throw new LeaseholdError(
      'LEASEHOLD_UNSUPPORTED',
      `the ${host.backend.name} backend has no result store for idempotency`,
    );
  }
  const lockKey = `idem:${key}`;
  const full = host.fullKey(lockKey);
  const read = (stored: string) => unpack(stored, key, o.deserialize) as T;
  const done = await store.get(full);
  if (done !== null) return read(done);
  // renewed while fn runs, whatever the Locks' default: a lock that expired under a slow fn let a
  // concurrent caller in, and fn ran twice
  const lockOpts: { wait?: Duration; signal?: AbortSignal; renew: boolean } = { renew: true };
  if (o.wait !== undefined) lockOpts.wait = o.wait;
  if (o.signal !== undefined) lockOpts.signal = o.signal;
  return host.withLock(
    lockKey,
    async (lease) => {
      const stored = await store.get(full); // a run that finished while we waited
      if (stored !== null) return read(stored);
      const value = await fn(lease);
      // from here on nothing may fail before the record is written: fn must not run again
      const { record, error } = pack(value, key, o.serialize);
      if (!(await store.put(full, lease.token, record, ttlMs))) {
        throw new LeaseLostError(key, 'the lease ended before the result could be stored');
      }
      if (error) throw error;
      return value;
    },
    lockOpts,
  );
}

function pack(
  value: unknown,
  key: string,
  serialize: ((v: unknown) => string) | undefined,
): { record: string; error?: UnserializableError } {
  try {
    if (!serialize) return { record: `{"v":${encode(value)}}` };
    const s = serialize(value);
    if (typeof s !== 'string') throw new TypeError(`serialize returned a ${typeof s}, not a string`);
    return { record: JSON.stringify({ s }) };
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    const error = new UnserializableError(
      `idempotent: "${key}" ran, but its result cannot be stored (${why}); it will not run again while the record lasts`,
      { cause: e },
    );
    return { record: JSON.stringify({ x: why.slice(0, 500) }), error };
  }
}

function unpack(stored: string, key: string, deserialize: ((s: string) => unknown) | undefined): unknown {
  let rec: { v?: unknown; s?: unknown; x?: unknown };
  try {
    rec = JSON.parse(stored) as typeof rec;
  } catch (e) {
    throw new UnserializableError(`idempotent: the stored result of "${key}" is not valid JSON`, { cause: e });
  }
  if (typeof rec.x === 'string') {
    throw new UnserializableError(`idempotent: "${key}" already ran, but its result could not be stored (${rec.x})`);
  }
  try {
    if (typeof rec.s === 'string') {
      if (!deserialize) throw new TypeError('it was stored by a custom serialize: pass deserialize');
      return deserialize(rec.s);
    }
    // records written before the codec are plain JSON: revived the same
    return revive(rec.v);
  } catch (e) {
    if (e instanceof UnserializableError) throw e;
    const why = e instanceof Error ? e.message : String(e);
    throw new UnserializableError(`idempotent: the stored result of "${key}" cannot be read (${why})`, { cause: e });
  }
}
