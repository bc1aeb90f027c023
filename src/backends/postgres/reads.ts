/**
 * Statements of the session backend (session.ts) that read or store beside a lock, with no
 * state of their own: what inspect shows, and the idempotency results.
 */
import type { LockInfo, ResultStore } from '../../backend.js';
import type { Cutoff } from '../../cutoff.js';
import { backendError, timed, type Conn, type Db } from './client.js';
import { checkFullKey, lockParts } from './keys.js';
import type { Statements } from './sql.js';

/** The holder row of `key` matched against pg_locks, or its runExclusive window; never a token. */
export async function inspectKey(db: Db, sql: Statements, timeoutMs: number, key: string): Promise<LockInfo | null> {
  const { classid, objid } = lockParts(BigInt(sql.lockKey(key)));
  let row;
  try {
    row = (await timed(db.query(sql.inspect, [key, classid, objid]), timeoutMs, 'inspect'))[0];
  } catch (e) {
    throw backendError(e, 'inspect');
  }
  if (!row) return null;
  if (row.held === true) {
    const info: LockInfo = { key, fence: BigInt(row.fence == null ? '0' : String(row.fence)), remainingMs: -1 };
    return row.mine === true && typeof row.value === 'string' ? { ...info, value: row.value } : info;
  }
  if (row.wfence != null) return { key, fence: BigInt(String(row.wfence)), remainingMs: Number(row.wait) };
  return null;
}

/** The stored result of `key` while it has not expired, or null. */
export async function readResult(db: Db, sql: Statements, timeoutMs: number, key: string): Promise<string | null> {
  try {
    const rows = await timed(db.query(sql.getResult, [key]), timeoutMs, 'result read');
    return typeof rows[0]?.value === 'string' ? rows[0].value : null;
  } catch (e) {
    throw backendError(e, 'result read');
  }
}

/**
 * Stores `value` for `key` on the connection that holds the lock `lockKey`, only while it holds
 * it (the server checks pg_locks): false when it no longer does.
 */
export async function writeResult(
  conn: Conn,
  sql: Statements,
  timeoutMs: number,
  write: { key: string; lockKey: string; value: string; ttlMs: number },
): Promise<boolean> {
  const { classid, objid } = lockParts(BigInt(write.lockKey));
  try {
    const params = [write.key, write.value, String(Math.ceil(write.ttlMs)), classid, objid];
    const rows = await timed(conn.query(sql.putResult, params), timeoutMs, 'result write');
    return rows[0]?.ok === true;
  } catch (e) {
    throw backendError(e, 'result write');
  }
}

/**
 * The backend's idempotency results: read on the pool once the schema is `ready`; stored on the
 * connection that holds the lock (`holding`: the lock `token` holds, if it does).
 */
export function resultStore(
  db: Db,
  sql: Statements,
  timeoutMs: number,
  ready: () => Promise<void>,
  holding: (key: string, token: string) => { readonly conn: Conn; readonly lockKey: string } | undefined,
  cutoff: Cutoff,
): ResultStore {
  const get = async (lockKey: string): Promise<string | null> => {
    checkFullKey(lockKey);
    await ready();
    return readResult(db, sql, timeoutMs, lockKey);
  };
  /** Stores only while `token` holds `lockKey`: checked here and by the server (pg_locks). */
  const put = async (lockKey: string, token: string, value: string, ttlMs: number): Promise<boolean> => {
    const h = holding(lockKey, token);
    if (!h) return false;
    return writeResult(h.conn, sql, timeoutMs, { key: lockKey, lockKey: h.lockKey, value, ttlMs });
  };
  // bounded once close() began on our own pool (src/cutoff.ts)
  return {
    get: (lockKey) => cutoff.bound(get(lockKey)),
    put: (lockKey, token, value, ttlMs) => cutoff.bound(put(lockKey, token, value, ttlMs)),
  };
}

/** Ends a server session given up on, if it still holds one of `parts` (never a reused pid). */
export async function terminateHolder(db: Db, timeoutMs: number, pid: number, parts: string[]): Promise<void> {
  if (!Number.isInteger(pid) || pid <= 0 || parts.length === 0) return;
  const text = `SELECT pg_terminate_backend(pid) FROM (SELECT DISTINCT pid FROM pg_locks WHERE pid = $1::int4
    AND locktype = 'advisory' AND objsubid = 1 AND granted
    AND (classid::int8::text || ':' || objid::int8::text) = ANY ($2::text[])) p`;
  await timed(db.query(text, [String(pid), `{${parts.join(',')}}`]), timeoutMs, 'terminate').catch(() => {});
}
