/**
 * Transaction mode and fencing at the resource, inside the user's own transaction.
 *
 * `xactLock` / `tryXactLock` take `pg_advisory_xact_lock` on the same 64-bit key as session mode
 * (same prefix, same hashing) and bump the same fence row, so the two modes exclude each other
 * and share one fence sequence. COMMIT or ROLLBACK releases the lock; a NOTIFY sent in the same
 * statement is delivered at COMMIT and wakes session-mode waiters.
 *
 * `checkFence` records the highest fence a resource accepted and throws StaleFenceError for a
 * lower one (an equal fence passes), so a paused former holder's transaction rolls back.
 */
import { InvalidArgumentError, LeaseholdError, StaleFenceError } from '../../errors.js';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { adaptTx, type TxQueryable } from './adapt.js';
import { backendError, schemaError, type Params, type Queryable, type Row, type TransactionLike } from './client.js';
import { checkKey, checkOptions, describe, quoteIdent } from './keys.js';
import { createTables, tablesExist } from './ddl.js';
import { statements } from './sql.js';
import { checkString } from '../../validate.js';

export interface XactLockOptions {
  /** Namespace, as in `createLocks(…, { prefix })`. Default `'leasehold'`. */
  prefix?: string;
  /** Schema of the fence table. Default `'public'`. */
  schema?: string;
  /** NOTIFY channel that wakes session-mode waiters at COMMIT. Default `'leasehold'`. */
  channel?: string;
}

export interface CheckFenceOptions {
  /** Schema of the `leasehold_fence_seen` table. Default `'public'`. */
  schema?: string;
}

/**
 * `xactLock` / `tryXactLock` found no fence epoch recorded for the fence sequence's current run: a
 * fresh install, or the first grant since crash recovery reset the sequence. The epoch must be
 * bumped in its own durable commit before any fence is drawn — inside the caller's transaction a
 * ROLLBACK would undo the bump but not the drawn fence, which a later crash could then hand out
 * again. Nothing was locked and no fence drawn. `migrate(pool)` (or any session-mode `postgres(pool)`
 * connection) records it; then retry the transaction.
 */
export class FenceEpochError extends LeaseholdError {
  constructor(what: string) {
    super(
      'LEASEHOLD_FENCE_EPOCH',
      `postgres: ${what}: no fence epoch is recorded since the fence sequence was last reset (a fresh ` +
        'install, or a server crash): it must be recorded in its own durable commit, not inside your ' +
        'transaction. Run `await migrate(pool)` from leasehold/postgres (a session-mode postgres(pool) ' +
        'connection records it too), then retry the transaction (see docs/postgres.md, "Why fences never go back")',
    );
  }
}

const XACT_OPTIONS = ['prefix', 'schema', 'channel'] as const;
const INT8_MAX = 2n ** 63n - 1n;

/** "The tables exist" per database identity and schema, learned by seeing them. */
const known = new Set<string>();

interface Resolved {
  readonly fullKey: string;
  readonly quotedSchema: string;
  readonly channel: string;
}

function resolve(key: unknown, opts: unknown, what: string): Resolved {
  checkKey(key);
  const o = checkOptions(opts, XACT_OPTIONS, what);
  // createLocks's rule for a prefix (non-empty, well-formed UTF-16, ≤ 256 UTF-8 bytes), and no NUL
  // (Postgres text): two prefixes with different lone surrogates would otherwise name one lock
  const prefix = o.prefix === undefined ? 'leasehold' : checkString(o.prefix, `${what}: prefix`, 256);
  if (prefix.includes('\u0000')) {
    throw new InvalidArgumentError(`${what}: prefix must not contain NUL characters (Postgres text)`);
  }
  const quotedSchema = quoteIdent(o.schema ?? 'public', `${what}: schema`);
  const channel = (o.channel ?? 'leasehold') as string;
  quoteIdent(channel, `${what}: channel`);
  return { fullKey: `${prefix}:${key}`, quotedSchema, channel };
}

/** Creates the tables inside the user's transaction when missing (first use). */
async function ensure(q: TxQueryable, quotedSchema: string): Promise<void> {
  const id = q.identity === null ? null : `${q.identity}|${quotedSchema}`;
  if (id !== null && known.has(id)) return;
  if (await tablesExist(q, quotedSchema, false)) {
    if (id !== null) {
      known.add(id);
      // bounded (postgres.js instances made and ended per tenant, say): the oldest is checked again
      if (known.size > 4096) known.delete(known.values().next().value!);
    }
    return;
  }
  await createTables(q, quotedSchema); // commits (or rolls back) with the user's transaction
}

async function run(
  q: Queryable,
  quotedSchema: string,
  identity: string | null,
  text: string,
  params: Params,
  what: string,
): Promise<Row[]> {
  try {
    return await q.query(text, params);
  } catch (e) {
    if ((e as { code?: unknown })?.code === '42P01') known.delete(`${identity}|${quotedSchema}`);
    throw backendError(e, what);
  }
}

async function lock(
  tx: unknown,
  key: string,
  opts: XactLockOptions | undefined,
  wait: boolean,
): Promise<bigint | null> {
  const what = wait ? 'xactLock' : 'tryXactLock';
  const q = adaptTx(tx, what);
  const r = resolve(key, opts, what);
  const s = statements(r.quotedSchema);
  try {
    await ensure(q, r.quotedSchema);
  } catch (e) {
    throw schemaError(e, what);
  }
  // A client that cannot tell whether it is inside BEGIN: mark this transaction first (sent
  // before the lock statement, without waiting for its answer); the lock statement takes the lock
  // only in the transaction that carries the mark, so outside BEGIN nothing is locked.
  const mark = q.unsure ? randomBytes(12).toString('base64url') : null;
  const marked = mark === null ? null : run(q, r.quotedSchema, q.identity, s.markTx, [mark], what);
  marked?.catch(() => {}); // read below, after the lock statement
  const params = [s.lockKey(r.fullKey), r.fullKey, r.channel, mark];
  for (;;) {
    const rows = await run(q, r.quotedSchema, q.identity, wait ? s.xactLock : s.tryXactLock, params, what);
    if (marked) await marked;
    const row = rows[0];
    if (row?.tx === false) {
      throw new InvalidArgumentError(
        `${what}: the connection is not inside a transaction (run BEGIN first, or use sql.begin): ` +
          'the lock would end with the statement',
      );
    }
    // no epoch for the sequence's current run: recording one here would commit (or roll back) with
    // the caller's transaction, and a rolled-back bump would let a later crash repeat this fence
    if (row?.epoch === false) throw new FenceEpochError(what);
    if (row && row.fence != null) return BigInt(String(row.fence));
    if (!wait || !row) return null; // held elsewhere, or a runExclusive window is open
    // a runExclusive window (nothing locked, unless an earlier round waited for the lock): wait for
    // its end, as session mode's acquire does; or it waited for the lock: ask again (it is ours)
    if (row.wait != null) await sleep(Number(row.wait) + 5);
  }
}

/**
 * Waits for the transaction-level advisory lock on `key` inside the user's transaction `tx` (a
 * pg client inside BEGIN, a postgres.js `sql.begin` tx, or a reserved connection inside BEGIN)
 * and returns its fence. Released by COMMIT/ROLLBACK. The fence comes from the shared fence
 * sequence, which never rolls back, under an epoch committed before it was drawn: a rolled-back
 * transaction's fence is never issued again (its holder row does roll back with it). An open
 * runExclusive window on the key is waited out first, as session mode's acquire does. Throws
 * `FenceEpochError` (nothing locked) when no epoch is recorded since the sequence was last reset
 * (a fresh install, a server crash): run `migrate(pool)`, then retry. See docs/postgres.md.
 */
export async function xactLock(tx: TransactionLike, key: string, opts?: XactLockOptions): Promise<bigint> {
  return (await lock(tx, key, opts, true)) as bigint;
}

/**
 * Like `xactLock`, but resolves null at once when another session or transaction holds the key,
 * or a runExclusive window on it is open.
 */
export async function tryXactLock(tx: TransactionLike, key: string, opts?: XactLockOptions): Promise<bigint | null> {
  return lock(tx, key, opts, false);
}

function toFence(fence: unknown): bigint {
  if (typeof fence !== 'bigint' || fence < 0n || fence > INT8_MAX) {
    throw new InvalidArgumentError(`checkFence: fence must be a bigint between 0 and 2^63-1, got ${describe(fence)}`);
  }
  return fence;
}

/**
 * Inside the user's transaction: accepts `fence` for `resource` if it is at least the highest
 * seen (recording it), else throws StaleFenceError — let it propagate so the transaction rolls
 * back. One statement when accepted; a second read only to report the highest on rejection.
 */
export async function checkFence(
  tx: TransactionLike,
  resource: string,
  fence: bigint,
  opts?: CheckFenceOptions,
): Promise<void> {
  const q = adaptTx(tx, 'checkFence');
  checkKey(resource, 'resource');
  const f = toFence(fence);
  const o = checkOptions(opts, ['schema'], 'checkFence');
  const quotedSchema = quoteIdent(o.schema ?? 'public', 'checkFence: schema');
  const s = statements(quotedSchema);
  try {
    await ensure(q, quotedSchema);
  } catch (e) {
    throw schemaError(e, 'checkFence');
  }
  if (q.unsure) {
    // as in lock(): a client that cannot tell whether it is inside BEGIN marks the transaction,
    // and the server says whether the next statement is in it (sent together, one wait)
    const mark = randomBytes(12).toString('base64url');
    const marked = run(q, quotedSchema, q.identity, s.markTx, [mark], 'checkFence');
    marked.catch(() => {}); // read below
    const [row] = await run(q, quotedSchema, q.identity, s.inMarkedTx, [mark], 'checkFence');
    await marked;
    if (row?.tx !== true) {
      throw new InvalidArgumentError(
        'checkFence: the connection is not inside a transaction (run BEGIN first, or use sql.begin): ' +
          'the fence would be recorded apart from your write',
      );
    }
  }
  const rows = await run(q, quotedSchema, q.identity, s.checkFence, [resource, f.toString()], 'checkFence');
  if (rows.length > 0) return;
  const seen = await run(q, quotedSchema, q.identity, s.highestSeen, [resource], 'checkFence');
  const highest = seen[0]?.fence == null ? f + 1n : BigInt(String(seen[0].fence));
  throw new StaleFenceError(resource, f, highest > f ? highest : f + 1n);
}
