/**
 * Real Postgres for tests: pg Pools and postgres.js instances that are all closed by one call.
 * A missing server fails the run (it is never skipped).
 */
import pg from 'pg';
import postgresJs from 'postgres';
import type { Backend } from '../../src/backend.js';
import { lockParts, advisoryKey, postgres, type PostgresOptions } from '../../src/backends/postgres/index.js';

export const PG_URL = process.env.LEASEHOLD_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export type ClientKind = 'pg' | 'postgres.js';
export const KINDS: readonly ClientKind[] = ['pg', 'postgres.js'];

const unreachable = (e: unknown) =>
  new Error(`PostgreSQL at ${PG_URL} is not reachable (run scripts/services.sh): ${(e as Error)?.message ?? e}`);

/** Opens clients and remembers them so one call closes them all. */
export class Pg {
  private readonly closers: Array<() => Promise<unknown>> = [];
  private readonly ending: Promise<unknown>[] = [];
  private adminPool: pg.Pool | null = null;

  async pool(opts: pg.PoolConfig = {}): Promise<pg.Pool> {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 4, connectionTimeoutMillis: 3000, ...opts });
    pool.on('error', () => {}); // idle clients killed by tests (pg_terminate_backend)
    await pool.query('select 1').catch((e) => {
      void pool.end();
      throw unreachable(e);
    });
    this.closers.push(() => pool.end().catch(() => {}));
    return pool;
  }

  async sql(opts: Record<string, unknown> = {}): Promise<postgresJs.Sql> {
    const sql = postgresJs(PG_URL, { max: 4, connect_timeout: 3, onnotice: () => {}, ...opts });
    await sql`select 1`.catch((e) => {
      void sql.end({ timeout: 1 });
      throw unreachable(e);
    });
    this.closers.push(() => sql.end({ timeout: 2 }).catch(() => {}));
    return sql;
  }

  /** `pool`: more options of a pg Pool (`pipeline: true`, say); postgres.js takes none here. */
  async client(kind: ClientKind, max = 4, pool: pg.PoolConfig = {}): Promise<any> {
    return kind === 'pg' ? this.pool({ max, ...pool }) : this.sql({ max });
  }

  /** A backend over its own fresh client, as another process would have it; close() also ends that client. */
  async backend(kind: ClientKind, opts?: PostgresOptions, pool?: pg.PoolConfig): Promise<Backend> {
    const client = await this.client(kind, 4, pool);
    const b = postgres(client, opts);
    const close = b.close.bind(b);
    b.close = async () => {
      await close();
      // not awaited: a pool ends once its detached leases ran out (runExclusive windows)
      this.ending.push(kind === 'pg' ? client.end() : client.end({ timeout: 5 }));
    };
    return b;
  }

  async admin(): Promise<pg.Pool> {
    return (this.adminPool ??= await this.pool({ max: 3 }));
  }

  /** Server pids holding the session or transaction advisory lock of a namespaced key (in `schema`). */
  async holders(fullKey: string, schema?: string): Promise<number[]> {
    const { classid, objid } = lockParts(advisoryKey(fullKey, schema));
    const r = await (
      await this.admin()
    ).query(
      `select pid from pg_locks where locktype = 'advisory' and classid = $1::int8::oid and objid = $2::int8::oid
         and objsubid = 1 and granted and database = (select oid from pg_database where datname = current_database())`,
      [classid, objid],
    );
    return r.rows.map((x) => Number(x.pid));
  }

  /** The server pid waiting in the lock queue of a namespaced key, polled for up to ~5 s (undefined: none). */
  async waiter(fullKey: string): Promise<number | undefined> {
    const { classid, objid } = lockParts(advisoryKey(fullKey));
    for (let i = 0; i < 250; i++) {
      const r = await (
        await this.admin()
      ).query(
        `select pid from pg_locks where locktype = 'advisory' and classid = $1::int8::oid and objid = $2::int8::oid
           and objsubid = 1 and not granted`,
        [classid, objid],
      );
      if (r.rows[0]) return Number(r.rows[0].pid);
      await new Promise((r) => setTimeout(r, 20));
    }
    return undefined;
  }

  /**
   * Ends a server session and resolves once it is gone, with its locks: `pg_terminate_backend`
   * alone only signals it, and a lock attempt right after can still find the lock held.
   */
  async terminate(pid: number): Promise<void> {
    const admin = await this.admin();
    const v = await admin.query("select current_setting('server_version_num')::int as v");
    if (Number(v.rows[0].v) >= 140000) {
      const r = await admin.query('select pg_terminate_backend($1::int4, 5000) as done', [pid]);
      if (r.rows[0].done !== true) throw new Error(`session ${pid} did not end within 5 s`);
      return;
    }
    await admin.query('select pg_terminate_backend($1::int4)', [pid]);
    const until = performance.now() + 5000;
    while ((await admin.query('select 1 from pg_stat_activity where pid = $1::int4', [pid])).rows.length > 0) {
      if (performance.now() > until) throw new Error(`session ${pid} did not end within 5 s`);
    }
  }

  /** Ends the holder's session (`delete`), then optionally takes the lock from outside (`overwrite`). */
  async breakLock(fullKey: string, how: 'delete' | 'overwrite'): Promise<void> {
    const pids = await this.holders(fullKey);
    if (pids.length !== 1) throw new Error(`expected one holder of ${fullKey}, found ${pids.length}`);
    await this.terminate(pids[0]!);
    if (how === 'overwrite') {
      const outsider = new pg.Client({ connectionString: PG_URL });
      outsider.on('error', () => {});
      await outsider.connect();
      this.closers.push(() => outsider.end().catch(() => {}));
      // the session is gone and its lock free; lock_timeout only bounds a stuck server
      await outsider.query(`set lock_timeout = '5s'`);
      await outsider.query('select pg_advisory_lock($1::int8)', [advisoryKey(fullKey).toString()]);
    }
  }

  /** Rows under a key prefix in both tables (0 when they do not exist yet). */
  async countKeys(prefix: string): Promise<number> {
    const admin = await this.admin();
    let n = 0;
    for (const [table, column] of [
      ['leasehold_fences', 'key'],
      ['leasehold_fence_seen', 'resource'],
    ]) {
      const exists = await admin.query('select to_regclass($1) is not null as ok', [`public.${table}`]);
      if (!exists.rows[0].ok) continue;
      const r = await admin.query(`select count(*)::int as n from ${table} where starts_with(${column}, $1)`, [prefix]);
      n += Number(r.rows[0].n);
    }
    return n;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.ending.splice(0));
    await Promise.allSettled(this.closers.splice(0).map((f) => f()));
    this.adminPool = null;
  }
}
