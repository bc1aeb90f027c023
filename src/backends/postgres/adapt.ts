/** Detects the user's client (pg or postgres.js), for the backend and for their transactions. */
import { InvalidArgumentError } from '../../errors.js';
import type { Db, Queryable } from './client.js';
import { PgDb } from './pg.js';
import { PostgresJsDb } from './postgresjs.js';

function isPgPool(x: any): boolean {
  return (
    !!x &&
    typeof x === 'object' &&
    typeof x.connect === 'function' &&
    typeof x.query === 'function' &&
    typeof x.totalCount === 'number'
  );
}

function isPostgresJs(x: any): boolean {
  return (
    typeof x === 'function' &&
    typeof x.unsafe === 'function' &&
    typeof x.reserve === 'function' &&
    typeof x.begin === 'function'
  );
}

/** Detects the client. Throws InvalidArgumentError for anything else. */
export function adapt(client: unknown): Db {
  if (isPgPool(client)) return new PgDb(client);
  if (isPostgresJs(client)) return new PostgresJsDb(client);
  const c = client as any;
  if (typeof c === 'function' && typeof c.unsafe === 'function' && typeof c.release === 'function') {
    throw new InvalidArgumentError(
      'postgres(): pass the root postgres.js sql, not a reserved connection (sql.reserve())',
    );
  }
  throw new InvalidArgumentError('postgres(): pass a pg Pool or a postgres.js sql instance');
}

/** The user's transaction as xact.ts uses it. */
export interface TxQueryable extends Queryable {
  /**
   * Names the database (a pg client's server and database, a postgres.js instance), for caching
   * "the tables exist"; null when unknown (checked on every call).
   */
  readonly identity: string | null;
  /**
   * True when the client cannot tell whether it is inside a transaction block (a postgres.js
   * reserved connection, a pg-like object without `getTransactionStatus`): the lock statement
   * then checks it on the server (sql.ts `markTx`).
   */
  readonly unsure: boolean;
}

/** Names of postgres.js instances (each one database), by their `notify` (shared by its transactions). */
const ids = new WeakMap<object, string>();
let counter = 0;
/** A name unique to `o` in this process (for as long as `o` lives). */
function idOf(o: object): string {
  let id = ids.get(o);
  if (id === undefined) ids.set(o, (id = `postgres.js#${++counter}`));
  return id;
}

/**
 * The user's own transaction: a pg Client/PoolClient inside BEGIN, a postgres.js `sql.begin` tx,
 * or a postgres.js reserved connection (`sql.reserve()`) inside BEGIN — which only the server can
 * tell, so that one is checked there.
 */
export function adaptTx(tx: unknown, what: string): TxQueryable {
  const t = tx as any;
  if (typeof t === 'function' && typeof t.unsafe === 'function') {
    if (typeof t.begin === 'function') {
      throw new InvalidArgumentError(
        `${what}: pass the transaction (the sql.begin callback's argument), not the root sql`,
      );
    }
    // sql.begin's argument has savepoint(); a reserved connection (or anything else) may be outside BEGIN
    const unsure = typeof t.savepoint !== 'function';
    // one identity per postgres.js instance (one database): its `notify` is shared by the root
    // `sql`, its transactions and its reserved connections (none known: checked every time)
    return {
      identity: typeof t.notify === 'function' ? idOf(t.notify) : null,
      unsure,
      query: async (text, params = []) => [...(await t.unsafe(text, params))],
    };
  }
  if (t && typeof t === 'object' && typeof t.query === 'function') {
    if (isPgPool(t)) throw new InvalidArgumentError(`${what}: pass the client running your transaction, not the Pool`);
    // pg tracks the server's transaction status ('I' idle, 'T' in a transaction, 'E' failed)
    const known = typeof t.getTransactionStatus === 'function';
    if (known && t.getTransactionStatus() === 'I') {
      throw new InvalidArgumentError(`${what}: the client is not inside a transaction (run BEGIN first)`);
    }
    // the server and database a pg client names (a pg-like object without them: checked every time)
    const named = typeof t.host === 'string' && t.port != null && typeof t.database === 'string';
    const identity = named ? `pg:${t.host}:${String(t.port)}/${t.database}` : null;
    return { identity, unsure: !known, query: async (text, params = []) => (await t.query(text, params)).rows };
  }
  throw new InvalidArgumentError(`${what}: tx must be a pg client inside BEGIN or a postgres.js transaction`);
}
