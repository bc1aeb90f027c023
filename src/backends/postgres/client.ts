/**
 * What the backend needs from the two Postgres clients users have — `pg` (a `Pool`, pg.ts) and
 * porsager's `postgres` (`sql`, postgresjs.ts): a query on any pooled connection, a dedicated
 * connection (checked out, given back or destroyed), a LISTEN subscription, and a short
 * transaction (for `migrate`). SQL parameters travel only as bound parameters; the only
 * spliced text is a validated, double-quoted identifier.
 */
import { BackendError, LeaseholdError } from '../../errors.js';
import { redactText, scrubError } from '../../scrub.js';
import { race } from '../../wait.js';

/**
 * A pg `Pool` (the members leasehold uses). Structural on purpose: leasehold's declarations
 * never import pg or postgres, so a project with only one of them still type-checks.
 */
export interface PgPoolLike {
  connect(...args: never[]): unknown;
  query(...args: never[]): unknown;
  readonly totalCount: number;
}

/** A postgres.js `sql` instance (from `postgres(url)`), not a transaction or reserved connection. */
export interface PostgresJsLike {
  (...args: never[]): unknown;
  unsafe(...args: never[]): unknown;
  reserve(...args: never[]): unknown;
  begin(...args: never[]): unknown;
  /** A reserved connection (`await sql.reserve()`) has `release()`: it is one connection, not a pool. */
  readonly release?: never;
}

/** What `postgres()` and `migrate()` accept: a pg `Pool` or a postgres.js `sql`. */
export type PostgresClientLike = PgPoolLike | PostgresJsLike;

/** A pg `Client` / `PoolClient` inside BEGIN (not the Pool: the lock must be the transaction's). */
export interface PgTransactionLike {
  query(...args: never[]): unknown;
  readonly totalCount?: never;
}

/** A postgres.js transaction: the `sql.begin(tx => …)` callback's argument (not the root `sql`). */
export interface PostgresJsTransactionLike {
  (...args: never[]): unknown;
  unsafe(...args: never[]): unknown;
  readonly begin?: never;
}

/** A postgres.js reserved connection (`await sql.reserve()`) on which the caller ran BEGIN. */
export interface PostgresJsReservedLike {
  (...args: never[]): unknown;
  unsafe(...args: never[]): unknown;
  release(): void;
}

/** What `xactLock`, `tryXactLock` and `checkFence` accept: the caller's open transaction. */
export type TransactionLike = PgTransactionLike | PostgresJsTransactionLike | PostgresJsReservedLike;

export type Row = Record<string, unknown>;
export type Params = readonly (string | null)[];

export interface Queryable {
  query(text: string, params?: Params): Promise<Row[]>;
}

/** A connection taken from the user's pool for one held lock. */
export interface Conn extends Queryable {
  /** The server process id of the connection (for `pg_terminate_backend`). */
  readonly pid: number;
  /**
   * The process id announced at connect (BackendKeyData; pg keeps it, postgres.js tells it with
   * each result), when known: a pooler announces its own, unlike the server or a TCP proxy.
   */
  readonly keyPid?: number;
  /** True once the connection errored or closed (it is never queried again). */
  readonly closed: boolean;
  /**
   * Runs `text` as a named prepared statement of this connection (parsed and planned once per
   * connection): the lock statements on the long-lived session connection.
   */
  prepared(text: string, params?: Params): Promise<Row[]>;
  /** Called once when the connection errors or closes; at once if it already has. */
  onClose(cb: (cause: unknown) => void): void;
  /** Gives the connection back to the pool (or lets the pool drop it when it is closed). */
  release(): void;
  /** Closes the connection; the pool replaces it. */
  destroy(cause?: unknown): void;
}

export interface Subscription {
  close(): Promise<void>;
}

export interface ListenHandlers {
  message(payload: string): void;
  /** The subscription may have missed messages (reconnected) or is gone (`down`). */
  reset(down: boolean): void;
}

export interface Db extends Queryable {
  readonly kind: 'pg' | 'postgres.js';
  reserve(timeoutMs: number): Promise<Conn>;
  listen(channel: string, handlers: ListenHandlers, timeoutMs: number): Promise<Subscription>;
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
}

/** A timed-out network operation. The connection it ran on must not be reused. */
export class TimeoutError extends BackendError {
  constructor(what: string, ms: number) {
    super(`postgres: ${what} did not answer within ${ms}ms`);
  }
}

/**
 * A client error as a BackendError whose cause is scrubbed: postgres.js attaches the query's
 * parameters to its errors, and a connection error may reach the client's options (a password).
 */
export function backendError(e: unknown, what?: string): Error {
  if (e instanceof LeaseholdError) return scrubError(e);
  const cause = scrubError(e);
  const msg = redactText(cause.message);
  return new BackendError(what ? `postgres: ${what}: ${msg}` : `postgres: ${msg}`, { cause });
}

/**
 * An error while making sure the fence tables exist. Labelled "creating the fence table" only
 * when the server answered with an error (it carries a severity): a refused or broken
 * connection is reported as itself, with its cause.
 */
export function schemaError(e: unknown, where?: string): Error {
  const fromServer = typeof (e as { severity?: unknown } | null)?.severity === 'string';
  const what = fromServer ? [where, 'creating the fence table'].filter(Boolean).join(': ') : where;
  return what ? backendError(e, what) : backendError(e);
}

/** Races `p` against a timer. If the timer wins, a late result is handed to `late` (to give it back). */
export function timed<T>(p: Promise<T>, ms: number, what: string, late?: (value: T) => void): Promise<T> {
  return race(p, { ms, onTimeout: () => new TimeoutError(what, ms), late });
}

export const noop = (): void => {};

const names = new Map<string, string>();
/** A stable statement name for a text (the same text, the same name, on every connection). */
export function statementName(text: string): string {
  let n = names.get(text);
  if (!n) names.set(text, (n = `leasehold_${names.size + 1}`));
  return n;
}

/**
 * Close bookkeeping shared by the pg and postgres.js connection wrappers: the first failure
 * marks the connection closed and tells every `onClose` callback, once.
 */
export abstract class Closable {
  closed = false;
  protected cause: unknown;
  protected cbs: ((cause: unknown) => void)[] = [];

  onClose(cb: (cause: unknown) => void): void {
    if (this.closed) queueMicrotask(() => cb(this.cause));
    else this.cbs.push(cb);
  }

  protected fail(e: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.cause = e;
    const cbs = this.cbs;
    this.cbs = [];
    for (const cb of cbs) cb(e);
  }
}
