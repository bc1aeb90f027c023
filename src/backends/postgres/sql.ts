/**
 * Every statement the Postgres backend sends, and the schema it needs (created by ddl.ts).
 *
 * Tables (in `schema`, default `public`):
 *   leasehold_epoch       (id, epoch, started)   one row: the highest epoch recorded (durable)
 *   leasehold_epoch_mark  UNLOGGED (id, epoch)   one row: the epoch the sequence counts under now
 *   leasehold_fence_seq   UNLOGGED SEQUENCE      the fence counter, shared by every key (no flush)
 *   leasehold_holders     UNLOGGED (key, fence, pid, value)  last grant per key: fence, holder, value
 *   leasehold_windows     (key, until, fence)    runExclusive windows kept after the holder let go
 *   leasehold_results     (key, value, expires)  idempotency results, beside the lock that guards them
 *   leasehold_fences      (key, fence)           fences of earlier versions (read only, see docs)
 *   leasehold_fence_seen  (resource, fence)      highest fence a resource accepted (checkFence)
 * and one function, leasehold_after_wait (ddl.ts): the window check and fence of a grant out of the
 * server's lock queue, inside `waitLock` (its queries see what was committed during the wait).
 *
 * A fence is `(epoch << 40) + nextval(leasehold_fence_seq)`: one counter for all keys, in an
 * UNLOGGED sequence (no WAL, no transaction id, no flush per grant), strictly increasing while the
 * server runs. Crash recovery (of the whole server, or after one server process crashed) resets it
 * together with the unlogged mark row; a missing mark is what says so. The epoch is then bumped
 * and flushed, and the mark written, in one commit before any grant draws from the reset sequence;
 * each session connection reads the mark once (no connection outlives crash recovery), with the
 * sequence's OID, which each of its grants compares with the sequence it draws from (a sequence
 * re-created since, `createTables`, makes it read the mark again), so every fence after a reset is
 * above every fence before it. The lock and its fence are one statement that
 * writes no row; the holder row (fence, value, pid: for inspect/list/watch) is written off the
 * grant's path. See docs/postgres.md ("Why fences never go back").
 *
 * Only a validated, double-quoted schema name is spliced into SQL text; keys, fences, advisory
 * keys, values and channels are bound parameters. `int8` values travel as decimal strings and
 * come back as `::text`, so user type parsers (int8 → number) cannot lose precision.
 */
import { BASE_IDLE_S, userTimeout } from './keepalive.js';
import { advisoryKey } from './keys.js';

/** Bits of a fence below the epoch: 2^40 grants per key per server start. */
export const EPOCH_SHIFT = 40n;

export interface Statements {
  readonly fences: string;
  readonly seen: string;
  readonly holders: string;
  readonly windows: string;
  readonly results: string;
  /** The advisory key of a namespaced key in this schema (`advisoryKey`), as an `int8` parameter. */
  lockKey(fullKey: string): string;
  /**
   * $1 advisory key, $2 key, $3 the session's server pid, $4 the server's start (µs, as `epoch`
   * read it), $5 the epoch, $6 the fence sequence's OID (as `epoch` read it), $7 the TCP keepalive idle time (s) to set once
   * granted (tcp_user_timeout to match), or 0 (keepalive.ts) → { r }: r = the
   * fence (decimal digits: granted), 'held', `w<ms>` (a runExclusive window has ms left), 'moved'
   * (the statement ran on another server session: a transaction pooler; nothing was locked),
   * 'restarted' (another server start than the epoch's), 'sequence' (the sequence was re-created
   * since the epoch was read: read it again; nothing was locked). Writes nothing.
   */
  readonly acquire: string;
  /**
   * Like `acquire`, but waits in the server's lock queue (`pg_advisory_lock`, FIFO, woken alone
   * when its turn comes), for at most $7 ms (lock_timeout), $8 the keepalive idle time as $7 of `acquire`: r = a fence, `w<ms>`, 'moved',
   * 'restarted', 'sequence' (nothing locked, or the lock let go after a wait), or 'waited': it
   * had to wait and holds the lock now, but drew no fence (not under READ COMMITTED: see ddl.ts's
   * `leasehold_after_wait`, which decides a grant out of the queue), `afterWait` decides; a
   * lock_timeout is an error (55P03).
   */
  readonly waitLock: string;
  /**
   * `waitLock` for a schema without `leasehold_after_wait` (made by an earlier version and used
   * with `migrate: false`): a grant out of the queue always answers 'waited'.
   */
  readonly waitLockLegacy: string;
  /**
   * After `waitLock` answered 'waited' (the lock is held on this session), in a new statement
   * (a snapshot that sees a window written before the holder let go): the guards and the window
   * check of `acquire`, $1–$6 as there: r = a fence, `w<ms>` (the lock let go), 'moved',
   * 'restarted', or 'sequence' (the lock let go: read the epoch again, then wait again).
   */
  readonly afterWait: string;
  /**
   * → { epoch, started, seq }: the epoch the fence sequence counts under since its last reset (the
   * mark `bumpEpoch` wrote), the server's start (µs, for the acquire's guard) and the sequence's
   * OID as this statement's snapshot sees it (null when it is not the sequence the mark was read
   * with: read again); no row: none recorded.
   */
  readonly epoch: string;
  /**
   * $1 key, $2 fence, $3 pid, $4 value, $5 advisory key, $6 channel: the holder row of a grant
   * (never over a higher fence), and the grant's NOTIFY ('+' advisory key) when attended.
   */
  readonly record: string;
  /** $1 key, $2 advisory key: marks the key attended for 60 s (a waiter polling on NOTIFY). */
  readonly attendWait: string;
  /** $1 pid, $2 classid, $3 objid → a row when that session holds or waits for the lock. */
  readonly waiting: string;
  /** → { pid }: a waiter connection, set to notice a vanished client while it waits. */
  readonly waiterSetup: string;
  /** Lets go of every advisory lock of the session and resets what leasehold set on it. */
  readonly resetSession: string;
  /**
   * When the mark is missing (a fresh install, or crash recovery reset it with the sequence): bumps
   * the epoch and writes the mark, in one durable commit (`synchronous_commit` raised to `local`
   * if `off`, so the mark is seen only once the bump is on disk). A no-op when the mark is there.
   * Concurrent callers are serialised on the epoch row; a loser bumps again (the epoch may jump
   * by more than one) and keeps the winner's mark. Never inside a user's transaction.
   */
  readonly bumpEpoch: string;
  /**
   * $1 the TCP keepalive idle time (s) to set (tcp_user_timeout to match), or 0 → { pid, k }: the
   * server pid that ran it and the advisory keys (as classid:objid, space-separated, null: none)
   * this connection holds.
   */
  readonly heldHere: string;
  /**
   * $1 advisory key, $2 channel, $3 key → { ok, pid }; NOTIFY (delivered at commit, after the
   * unlock) when ok and someone attends the key (a waiter or watcher marked it, `attn`).
   */
  readonly release: string;
  /** $1 key, $2 advisory key, $3 ms: marks the key attended (its grants and releases NOTIFY). */
  readonly attend: string;
  /** $1 advisory key, $2 classid, $3 objid: unlocks only if this connection holds it (no WARNING). */
  readonly unlockIfHeld: string;
  /** $1 key, $2 until (ms from now), $3 fence: stores a window (durably). */
  readonly keepWindow: string;
  /** $1 key, $2 classid, $3 objid → { fence, value, held, wait }. */
  readonly inspect: string;
  /** $1 prefix → { key, fence, value, wait } of held locks and open windows. */
  readonly list: string;
  /**
   * $1 advisory key, $2 key, $3 channel, $4 a `markTx` mark or null → { fence, epoch, tx }; waits
   * for the lock. NOTIFY at COMMIT. With a mark, nothing is locked unless this statement runs in
   * the transaction that set it (`tx` false: it does not, e.g. a connection outside BEGIN, where
   * the lock would end with the statement); `epoch` false: no epoch recorded for the sequence's
   * current run (`bumpEpoch` has not run since a reset; nothing locked either); `wait` (ms) while
   * a runExclusive window is open (nothing locked); else `fence`, or none when it had to wait for
   * the lock (it holds it now: ask again).
   */
  readonly xactLock: string;
  /** Same, without waiting: `fence` null when the lock is held elsewhere or a window is open. */
  readonly tryXactLock: string;
  /**
   * $1 a random mark → sets `leasehold.xact` to it for the current transaction only: a later
   * statement sees it only when both run in one transaction block (an implicit one-statement
   * transaction forgets it when the statement ends).
   */
  readonly markTx: string;
  /** $1 the mark `markTx` set → { tx } true when this statement runs in the transaction that set it. */
  readonly inMarkedTx: string;
  /** $1 resource, $2 fence → a row when accepted (fence ≥ highest seen), none when stale. */
  readonly checkFence: string;
  /** $1 resource → { fence } the highest seen. */
  readonly highestSeen: string;
  /** $1 key → { value } while not expired. */
  readonly getResult: string;
  /** $1 key, $2 value, $3 ttl ms, $4 classid, $5 objid → { ok } when this connection holds the lock. */
  readonly putResult: string;
  /** $1 prefix → { n } rows under a key prefix (holders, windows, results). */
  readonly countKeys: string;
}

/** The function that decides a grant out of the server's queue (created by ddl.ts, see there). */
export const AFTER_WAIT_FN = 'leasehold_after_wait';

const cache = new Map<string, Statements>();

/**
 * Select-list items that turn off, for this session, the user's pool timeouts that would end a
 * statement or a session of leasehold's own connections (the session and its waiter
 * connections): a blocking wait runs for as long as the caller waits, and the session idles
 * while it holds locks. leasehold bounds its statements itself; resetSession restores them.
 */
export const noTimeouts = `set_config('statement_timeout', '0', false) AS st,
      CASE WHEN current_setting('server_version_num')::int >= 140000
        THEN set_config('idle_session_timeout', '0', false) END AS ist,
      CASE WHEN current_setting('server_version_num')::int >= 170000
        THEN set_config('transaction_timeout', '0', false) END AS tt`;

const inPgLocks = (classid: string, objid: string) =>
  `locktype = 'advisory' AND classid = ${classid}::int8::oid AND objid = ${objid}::int8::oid AND objsubid = 1 AND granted`;

/** The statements for one (already quoted) schema. */
export function statements(quotedSchema: string): Statements {
  let s = cache.get(quotedSchema);
  if (s) return s;
  const t = (name: string) => `${quotedSchema}.${name}`;
  const fences = t('leasehold_fences');
  const seen = t('leasehold_fence_seen');
  const epochs = t('leasehold_epoch');
  const mark = t('leasehold_epoch_mark');
  const holders = t('leasehold_holders');
  const windows = t('leasehold_windows');
  const results = t('leasehold_results');
  // A session that runs with synchronous_commit = off is raised to `local` for this one commit.
  const durable = `d AS (SELECT CASE WHEN current_setting('synchronous_commit') = 'off'
      THEN set_config('synchronous_commit', 'local', true) END AS s)`;
  const seq = t('leasehold_fence_seq');
  const seqOid = `'${seq.replace(/'/g, "''")}'::regclass`;
  // A cached plan names the sequence by OID (re-planned when it is dropped): this statement's
  // snapshot sees that sequence's catalog row only if the transaction that created it (and removed
  // the mark) is visible to it; else the mark read is an earlier sequence's, no epoch for this one.
  const seqVisible = `EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = ${seqOid})`;
  // the epoch of the sequence's current run: only a committed, flushed bump writes the mark
  const epoch = `e AS (SELECT epoch FROM ${mark} WHERE id = 1 AND ${seqVisible})`;
  const nextFence = (e: string) => `((${e} << ${EPOCH_SHIFT}) + nextval(${seqOid}))`;
  // The CTE holding the volatile lock call is materialised and scanned exactly once, before the
  // INSERT sees a row, so the counter moves only when (and after) the lock was granted.
  const grant = (from: string) => `f AS (SELECT ${nextFence('e.epoch')} AS fence FROM ${from}),
      g AS (INSERT INTO ${holders} AS h (key, fence, pid, value, lk)
      SELECT $2::text, f.fence, pg_backend_pid(), VALUE, $1::int8 FROM f
      ON CONFLICT (key) DO UPDATE SET fence = GREATEST(h.fence, excluded.fence), pid = excluded.pid,
        value = excluded.value
      RETURNING h.fence)`;
  // transaction mode: the lock only inside the transaction that set the mark (when one is given)
  const inTx = `x AS (SELECT 1 AS ok WHERE $4::text IS NULL OR current_setting('leasehold.xact', true) = $4::text)`;
  const leftMs = (col: string) => `GREATEST(0, ceil(extract(epoch FROM ${col} - clock_timestamp()) * 1000))::int8`;
  // transaction mode: a runExclusive window is checked before the lock (a transaction-level lock
  // cannot be given back): while one is open nothing is locked and `wait` says for how long
  const xactWindow = `w AS (SELECT ${leftMs('until')} AS ms FROM ${windows}
        WHERE key = $2::text AND until > clock_timestamp())`;
  const xactResult = `(SELECT fence::text FROM f) AS fence, (SELECT count(*) FROM g) AS g,
        EXISTS (SELECT 1 FROM e) AS epoch, EXISTS (SELECT 1 FROM x) AS tx, (SELECT ms::text FROM w) AS wait,
        CASE WHEN EXISTS (SELECT 1 FROM f) THEN pg_notify($3::text, $1::int8::text) END AS n`;
  const startedUs = `(extract(epoch FROM pg_postmaster_start_time()) * 1000000)::int8`;
  // One statement, no row written: the session guard, the lock, the window check, the fence. One
  // expression, one text column (no CTE, no second column: the cheapest statement for the server
  // to start and the client to read); CASE evaluates its branches in order, so the lock is taken
  // only after the guards pass and the fence is drawn only for a granted lock.
  // once the lock is granted, and only when $idle > 0 (keepalive.ts): the session's TCP keepalive
  // idle time and tcp_user_timeout are raised to the lease's TTL (a branch never taken: not null)
  const raise = (idle: string) =>
    `${idle}::int4 > 0 AND (set_config('tcp_keepalives_idle', ${idle}::int4::text, false) IS NULL
          OR ${userTimeout(`${idle}::int4`)} IS NULL)`;
  // the lock is held: a runExclusive window lets it go at once (and says how long is left), else the fence
  const windowOrFence = `WHEN EXISTS (SELECT 1 FROM ${windows} WHERE key = $2::text AND until > clock_timestamp())
          THEN CASE WHEN pg_advisory_unlock($1::int8) THEN 'w' || COALESCE((SELECT ${leftMs('until')}
            FROM ${windows} WHERE key = $2::text AND until > clock_timestamp()), 0) END
        ELSE (${nextFence('$5::int8')})::text END AS r`;
  const waitFirst = `\n        WHEN set_config('lock_timeout', $7::int8::text, false) IS NULL THEN NULL`;
  // `refused`: the answer when the lock call is refused ('held', or waitLock's wait in the queue)
  const lockStatement = (lockCall: string, idle: string, first = '', refused = "'held'") => `SELECT CASE${first}
        WHEN pg_backend_pid() <> $3::int4 THEN 'moved'
        WHEN ${startedUs} <> $4::int8 THEN 'restarted'
        WHEN ${seqOid}::oid <> $6::oid THEN 'sequence'
        WHEN NOT ${lockCall} THEN ${refused}
        WHEN ${raise(idle)} THEN NULL
        ${windowOrFence}`;
  s = {
    fences,
    seen,
    holders,
    windows,
    results,
    lockKey: (fullKey) => advisoryKey(fullKey, quotedSchema.slice(1, -1)).toString(),
    acquire: lockStatement('pg_try_advisory_lock($1::int8)', '$7'),
    // lock_timeout is set (for this session) before the lock call: the first branch, never taken.
    // Free (no one holds or waits: a try is refused while anyone waits, so nobody barges): as
    // `acquire`. Else it waits in the queue and, once granted, the function decides: this
    // statement's snapshot was taken before the wait and would miss a runExclusive window the
    // holder committed just before letting go; the function's own queries take new snapshots
    waitLock: lockStatement(
      'pg_try_advisory_lock($1::int8)',
      '$8',
      waitFirst,
      `CASE WHEN pg_advisory_lock($1::int8) IS NULL THEN NULL
          WHEN ${raise('$8')} THEN NULL
          ELSE ${t(AFTER_WAIT_FN)}($1::int8, $2::text, $6::oid, $5::int8) END`,
    ),
    waitLockLegacy: lockStatement(
      'pg_try_advisory_lock($1::int8)',
      '$8',
      waitFirst,
      `CASE WHEN pg_advisory_lock($1::int8) IS NULL THEN NULL
          WHEN ${raise('$8')} THEN NULL ELSE 'waited' END`,
    ),
    afterWait: `SELECT CASE
        WHEN pg_backend_pid() <> $3::int4 THEN 'moved'
        WHEN ${startedUs} <> $4::int8 THEN 'restarted'
        WHEN ${seqOid}::oid <> $6::oid THEN CASE WHEN pg_advisory_unlock($1::int8) THEN 'sequence' END
        ${windowOrFence}`,
    epoch: `SELECT epoch::text AS epoch, ${startedUs}::text AS started,
      CASE WHEN ${seqVisible} THEN ${seqOid}::oid::text END AS seq FROM ${mark} WHERE id = 1`,
    record: `WITH r AS (INSERT INTO ${holders} AS h (key, fence, pid, value, lk)
      VALUES ($1::text, $2::int8, $3::int4, $4::text, $5::int8)
      ON CONFLICT (key) DO UPDATE SET fence = excluded.fence, pid = excluded.pid, value = excluded.value,
        lk = excluded.lk WHERE h.fence < excluded.fence
      RETURNING h.attn)
      SELECT CASE WHEN EXISTS (SELECT 1 FROM r WHERE attn > clock_timestamp())
        THEN pg_notify($6::text, '+' || $5::int8::text) END AS n`,
    waiting: `SELECT 1 AS w FROM pg_locks WHERE pid = $1::int4 AND locktype = 'advisory'
      AND classid = $2::int8::oid AND objid = $3::int8::oid AND objsubid = 1`,
    // client_connection_check_interval (14+): a waiting backend whose client closed leaves the
    // queue within 1 s; keepalives and tcp_user_timeout (12+): within ~8 s of a vanished host or a
    // partition (TCP connections; raised to the waiter's TTL once granted, keepalive.ts); none of the
    // pool's timeouts (statement_timeout would cancel the wait: its place in the queue lost)
    waiterSetup: `SELECT pg_backend_pid() AS pid,
      CASE WHEN current_setting('server_version_num')::int >= 140000
        THEN set_config('client_connection_check_interval', '1000', false) END AS c,
      set_config('tcp_keepalives_idle', '5', false) AS i, set_config('tcp_keepalives_interval', '1', false) AS v,
      set_config('tcp_keepalives_count', '3', false) AS n, ${userTimeout(String(BASE_IDLE_S))} AS u,
      set_config('plan_cache_mode', 'force_generic_plan', false) AS plans, ${noTimeouts}`,
    resetSession: `SELECT pg_advisory_unlock_all() IS NULL AS u,
      (SELECT count(set_config(name, reset_val, false)) FROM pg_settings WHERE name IN ('lock_timeout',
        'client_connection_check_interval', 'tcp_keepalives_idle', 'tcp_keepalives_interval',
        'tcp_keepalives_count', 'tcp_user_timeout', 'plan_cache_mode', 'statement_timeout',
        'idle_session_timeout', 'transaction_timeout')) AS n`,
    attendWait: `UPDATE ${holders} SET attn = GREATEST(attn, clock_timestamp() + interval '60 seconds')
      WHERE key = $1::text`,
    bumpEpoch: `WITH ${durable},
      b AS (INSERT INTO ${epochs} AS x (id, epoch, started)
        SELECT 1, 1, pg_postmaster_start_time() FROM d WHERE NOT EXISTS (SELECT 1 FROM ${mark} WHERE id = 1)
        ON CONFLICT (id) DO UPDATE SET epoch = x.epoch + 1, started = excluded.started
        RETURNING x.epoch)
      INSERT INTO ${mark} (id, epoch) SELECT 1, epoch FROM b ON CONFLICT (id) DO NOTHING`,
    // one row, whatever is held (an aggregate): the keepalive raise runs even when nothing is
    heldHere: `SELECT pg_backend_pid() AS pid, string_agg(classid::int8::text || ':' || objid::int8::text, ' ') AS k,
        CASE WHEN $1::int4 > 0 THEN set_config('tcp_keepalives_idle', $1::int4::text, false) END AS i,
        CASE WHEN $1::int4 > 0 THEN ${userTimeout('$1::int4')} END AS u
      FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND objsubid = 1 AND granted`,
    release: `SELECT CASE WHEN NOT pg_advisory_unlock($1::int8) THEN false
        WHEN EXISTS (SELECT 1 FROM ${holders} WHERE key = $3::text AND attn > clock_timestamp())
          THEN pg_notify($2::text, $1::int8::text) IS NOT NULL
        ELSE true END AS ok, pg_backend_pid() AS pid`,
    attend: `INSERT INTO ${holders} AS h (key, fence, pid, value, lk, attn)
      VALUES ($1::text, 0, 0, NULL, $2::int8, clock_timestamp() + $3::int8 * interval '1 millisecond')
      ON CONFLICT (key) DO UPDATE SET attn = GREATEST(h.attn, excluded.attn)`,
    unlockIfHeld: `SELECT count(*)::int AS n FROM (SELECT pg_advisory_unlock($1::int8) FROM pg_locks
      WHERE pid = pg_backend_pid() AND ${inPgLocks('$2', '$3')}) u`,
    keepWindow: `WITH ${durable},
      c AS (DELETE FROM ${windows} WHERE key IN (SELECT key FROM ${windows}
        WHERE until < clock_timestamp() AND key <> $1::text LIMIT 100))
      INSERT INTO ${windows} AS w (key, until, fence)
      SELECT $1::text, clock_timestamp() + $2::int8 * interval '1 millisecond', $3::int8 FROM d
      ON CONFLICT (key) DO UPDATE SET until = excluded.until, fence = excluded.fence`,
    inspect: `SELECT h.fence::text AS fence, h.value,
        EXISTS (SELECT 1 FROM pg_locks WHERE ${inPgLocks('$2', '$3')} AND pid = h.pid) AS mine,
        EXISTS (SELECT 1 FROM pg_locks WHERE ${inPgLocks('$2', '$3')}
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) AS held,
        (SELECT fence::text FROM ${windows} WHERE key = $1::text AND until > clock_timestamp()) AS wfence,
        (SELECT ${leftMs('until')} FROM ${windows} WHERE key = $1::text AND until > clock_timestamp()) AS wait
      FROM (SELECT 1) one LEFT JOIN ${holders} h ON h.key = $1::text`,
    list: `SELECT h.key, h.fence::text AS fence, h.value, -1::int8 AS wait FROM ${holders} h
        WHERE starts_with(h.key, $1::text) AND EXISTS (SELECT 1 FROM pg_locks p
          WHERE p.pid = h.pid AND p.locktype = 'advisory' AND p.objsubid = 1 AND p.granted
            AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND p.classid = ((h.lk >> 32) & 4294967295)::oid AND p.objid = (h.lk & 4294967295)::oid)
      UNION ALL
      SELECT w.key, w.fence::text, NULL, ${leftMs('w.until')} FROM ${windows} w
        WHERE starts_with(w.key, $1::text) AND w.until > clock_timestamp()`,
    // granted at once: the fence; else it waits in the server's queue and draws no fence (`got`
    // false): the statement's snapshot predates the wait, so a window the holder left meanwhile
    // is seen only by the next statement, which asks again (the lock is this transaction's now)
    xactLock: `WITH ${epoch}, ${inTx}, ${xactWindow},
      l AS (SELECT CASE WHEN pg_try_advisory_xact_lock($1::int8) THEN true
          WHEN pg_advisory_xact_lock($1::int8) IS NOT NULL THEN false END AS got
        FROM e, x WHERE NOT EXISTS (SELECT 1 FROM w)),
      ${grant('e, l WHERE l.got').replace('VALUE', 'NULL::text')}
      SELECT ${xactResult}`,
    tryXactLock: `WITH ${epoch}, ${inTx}, ${xactWindow},
      l AS (SELECT pg_try_advisory_xact_lock($1::int8) AS got FROM e, x WHERE NOT EXISTS (SELECT 1 FROM w)),
      ${grant('e, l WHERE l.got').replace('VALUE', 'NULL::text')}
      SELECT ${xactResult}`,
    markTx: `SELECT set_config('leasehold.xact', $1::text, true) IS NOT NULL AS marked`,
    inMarkedTx: `SELECT coalesce(current_setting('leasehold.xact', true) = $1::text, false) AS tx`,
    checkFence: `INSERT INTO ${seen} AS t (resource, fence) VALUES ($1::text, $2::int8)
      ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence WHERE excluded.fence >= t.fence
      RETURNING t.fence::text AS fence`,
    highestSeen: `SELECT fence::text AS fence FROM ${seen} WHERE resource = $1::text`,
    getResult: `SELECT value FROM ${results} WHERE key = $1::text AND expires > clock_timestamp()`,
    putResult: `WITH ${durable},
      ok AS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND ${inPgLocks('$4', '$5')}),
      c AS (DELETE FROM ${results} WHERE key IN (SELECT key FROM ${results}
        WHERE expires < clock_timestamp() AND key <> $1::text LIMIT 100))
      INSERT INTO ${results} AS r (key, value, expires)
      SELECT $1::text, $2::text, clock_timestamp() + $3::int8 * interval '1 millisecond' FROM ok, d
      ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires
      RETURNING true AS ok`,
    countKeys: `SELECT (SELECT count(*) FROM ${holders} WHERE starts_with(key, $1::text))
      + (SELECT count(*) FROM ${windows} WHERE starts_with(key, $1::text))
      + (SELECT count(*) FROM ${results} WHERE starts_with(key, $1::text)) AS n`,
  };
  cache.set(quotedSchema, s);
  return s;
}
