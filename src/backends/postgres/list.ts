/**
 * Administration for `leasehold status` and `leasehold release --force`: which advisory locks of
 * this database are held (the holder rows, matched against pg_locks) or kept as runExclusive
 * windows, and breaking one by terminating the session that holds it (needs the right to signal
 * that session: superuser, the same role, or pg_signal_backend). A session carries all the locks
 * of one Locks instance, so breaking one lock ends every lease of that holder (each is signalled
 * lost). Wired into the backend by one line in index.ts.
 */
import type { LockInfo } from '../../backend.js';
import { BackendError } from '../../errors.js';
import { backendError, type Db } from './client.js';
import { lockParts } from './keys.js';
import { statements } from './sql.js';

const HELD = `SELECT classid::int8::text AS classid, objid::int8::text AS objid, pid FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND objsubid = 1
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`;

const undefinedTable = (e: unknown) => (e as { code?: string }).code === '42P01';

export function postgresAdmin(db: Db, quotedSchema: string, channel: string) {
  const sql = statements(quotedSchema);
  /** The holder row's fence and value (the value as `status` shows it), read before a break. */
  const rowOf = async (key: string): Promise<{ fence: bigint; value?: string }> => {
    const rows = await db.query(`SELECT fence::text AS fence, value FROM ${sql.holders} WHERE key = $1::text`, [key]);
    const fence = BigInt(String(rows[0]?.fence ?? '0'));
    const value = rows[0]?.value;
    return typeof value === 'string' ? { fence, value } : { fence };
  };
  return {
    async *list(prefix: string): AsyncIterable<LockInfo> {
      let rows;
      try {
        rows = await db.query(sql.list, [prefix]);
      } catch (e) {
        if (undefinedTable(e)) return; // nothing was ever locked with this schema
        throw backendError(e, 'list');
      }
      for (const r of rows) {
        const info: LockInfo = { key: String(r.key), fence: BigInt(String(r.fence)), remainingMs: Number(r.wait) };
        yield typeof r.value === 'string' ? { ...info, value: r.value } : info;
      }
    },

    async forceRelease(key: string): Promise<LockInfo | null> {
      const { classid, objid } = lockParts(BigInt(sql.lockKey(key)));
      try {
        const holders = (await db.query(HELD)).filter((r) => r.classid === classid && r.objid === objid);
        if (holders.length === 0) return null;
        // before: a waiter bumps the fence once the lock is free
        const row = await rowOf(key).catch(() => ({ fence: 0n }));
        const version = Number((await db.query(`SELECT current_setting('server_version_num') AS v`))[0]?.v);
        // from 14 on, wait (up to 5 s) until the session is gone and its lock with it
        const terminate = version >= 140000 ? `pg_terminate_backend($1::int, 5000)` : `pg_terminate_backend($1::int)`;
        let done = false;
        for (const h of holders) {
          const r = await db.query(`SELECT ${terminate} AS done`, [String(h.pid)]);
          done = done || r[0]?.done === true;
        }
        if (!done) throw new BackendError(`postgres: the session holding "${key}" could not be terminated`);
        await db.query(`SELECT pg_notify($1::text, $2::text)`, [channel, sql.lockKey(key)]);
        return { key, ...row, remainingMs: -1 };
      } catch (e) {
        throw backendError(e, 'forceRelease');
      }
    },
  };
}
