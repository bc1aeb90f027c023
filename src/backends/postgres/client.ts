/**
 * What the backend needs from the two Postgres clients users have — `pg` (a `Pool`, pg.ts) and
 * porsager's `postgres` (`sql`, postgresjs.ts): a query on any pooled connection, a dedicated
 * connection (checked out, given back or destroyed), a LISTEN subscription, and a short
 * transaction (for `migrate`). SQL parameters travel only as bound parameters; the only
 * spliced text is a validated, double-quoted identifier.
 */
import { BackendError, InvalidArgumentError } from '../../errors.js';

export type Row = Record<string, unknown>;
export type Params = readonly (string | null)[];

export interface Queryable {
  query(text: string, params?: Params): Promise<Row[]>;
}

/** A connection taken from the user's pool for one held lock. */
export interface Conn extends Queryable {
  /** The server process id of the connection (for `pg_terminate_backend`). */
  readonly pid: number;
  /** True once the connection errored or closed (it is never queried again). */
  readonly closed: boolean;
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

export function backendError(e: unknown, what: string): Error {
  if (e instanceof BackendError || e instanceof InvalidArgumentError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  return new BackendError(`postgres: ${what}: ${msg}`, { cause: e });
}

/** Races `p` against a timer. If the timer wins, a late result is handed to `late` (to give it back). */
export function timed<T>(p: Promise<T>, ms: number, what: string, late?: (value: T) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      settled = true;
      reject(new TimeoutError(what, ms));
    }, ms);
    p.then(
      (v) => {
        if (!settled) {
          settled = true;
          clearTimeout(timer);
          resolve(v);
        } else if (late) late(v);
      },
      (e) => {
        if (!settled) {
          settled = true;
          clearTimeout(timer);
          reject(e);
        }
      },
    );
  });
}

export const noop = (): void => {};

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
