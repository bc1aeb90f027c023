/**
 * A grant out of the server's lock queue is decided inside the waiting statement, by the schema's
 * `leasehold_after_wait` function (its queries take new snapshots under READ COMMITTED, so they
 * see a runExclusive window the holder committed during the wait): one statement per handoff.
 * Also: the fallbacks (another isolation level, a schema made by an earlier version without the
 * function) and the function's creation on first use and by `migrate()`.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { createLocks } from '../../src/index.js';
import { migrate, postgres } from '../../src/backends/postgres/index.js';
import { KINDS, Pg, PG_URL, type ClientKind } from './support.js';
import { queuedPid, windowAgainstQueued } from './window.js';
import postgresJs from 'postgres';

const env = new Pg();
const ends: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  await Promise.allSettled(ends.map((f) => f()));
  await env.closeAll();
});

const uid = () => randomUUID().slice(0, 8);

/** The last statement a server session ran (pg_stat_activity). */
async function lastStatement(pid: number): Promise<string> {
  const r = await (await env.admin()).query('select query from pg_stat_activity where pid = $1::int4', [pid]);
  return String(r.rows[0]?.query);
}

/** A client of `kind` whose sessions run every transaction under REPEATABLE READ. */
async function repeatableRead(kind: ClientKind): Promise<any> {
  if (kind === 'pg') return env.pool({ max: 4, options: '-c default_transaction_isolation=repeatable\\ read' });
  const sql = postgresJs(PG_URL, {
    max: 4,
    onnotice: () => {},
    connection: { default_transaction_isolation: 'repeatable read' },
  });
  ends.push(() => sql.end({ timeout: 5 }));
  return sql;
}

const hasFunction = async (schema: string): Promise<boolean> => {
  const r = await (
    await env.admin()
  ).query(
    `select count(*)::int as n from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = $1 and p.proname = 'leasehold_after_wait'`,
    [schema],
  );
  return r.rows[0].n === 1;
};

describe.each(KINDS)('%s', (kind) => {
  test('a grant out of the queue is decided in the waiting statement: no second statement', async () => {
    const prefix = `lh-${uid()}`;
    const backB = postgres(await env.client(kind));
    const a = createLocks(await env.backend(kind), { prefix, ttl: '30s' });
    const b = createLocks(backB, { prefix, ttl: '30s' });
    try {
      const first = await a.acquire('k');
      const waiting = b.acquire('k', { wait: '10s' });
      waiting.catch(() => {}); // awaited below
      const pid = await queuedPid(env, `${prefix}:k`);
      await first.release();
      const second = await waiting;
      expect(second.fence > first.fence).toBe(true);
      expect(backB.stats.queueGrants).toBe(1);
      // the waiter's session ran nothing after its waiting statement
      expect(await lastStatement(pid)).toContain('pg_advisory_lock($1::int8)');
      await second.release();
      // and a window is still seen from the queue (the test of window-wait.test.ts, pid checked)
      const w = await windowAgainstQueued(env, a, b, `${prefix}:job`);
      expect(await lastStatement(w)).toContain('leasehold_after_wait(');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  test('under REPEATABLE READ (the function would see the snapshot of before the wait) a window is still seen', async () => {
    const prefix = `lh-${uid()}`;
    const schema = `lh_fn_${uid()}`;
    const a = createLocks(postgres(await repeatableRead(kind), { schema }), { prefix, ttl: '30s' });
    const b = createLocks(postgres(await repeatableRead(kind), { schema }), { prefix, ttl: '30s' });
    try {
      await windowAgainstQueued(env, a, b, `${prefix}:job`, schema);
    } finally {
      await Promise.all([a.close(), b.close()]);
      await (await env.admin()).query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });

  test('a schema made by an earlier version (no function): waits work with migrate: false, first use or migrate() adds it', async () => {
    const schema = `lh_fn_${uid()}`;
    const admin = await env.admin();
    const ca = await env.client(kind, 6);
    const cb = await env.client(kind, 6);
    await migrate(ca, { schema });
    await admin.query(`DROP FUNCTION "${schema}".leasehold_after_wait`);
    try {
      // migrate: false: nothing is created; a grant out of the queue checks the window the old way
      const prefix = `lh-${uid()}`;
      const a = createLocks(postgres(ca, { schema, migrate: false }), { prefix, ttl: '30s' });
      const b = createLocks(postgres(cb, { schema, migrate: false }), { prefix, ttl: '30s' });
      await windowAgainstQueued(env, a, b, `${prefix}:job`, schema);
      await windowAgainstQueued(env, b, a, `${prefix}:job`, schema);
      await Promise.all([a.close(), b.close()]);
      expect(await hasFunction(schema)).toBe(false);
      // first use of a backend that may migrate: created
      const c = createLocks(postgres(ca, { schema }), { prefix, ttl: '30s' });
      await (await c.acquire('x')).release();
      await c.close();
      expect(await hasFunction(schema)).toBe(true);
      // migrate(): created
      await admin.query(`DROP FUNCTION "${schema}".leasehold_after_wait`);
      await migrate(cb, { schema });
      expect(await hasFunction(schema)).toBe(true);
      const fn = await admin.query(
        `select p.prosecdef, p.provolatile, p.proconfig from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = $1 and p.proname = 'leasehold_after_wait'`,
        [schema],
      );
      expect(fn.rows[0]).toEqual({
        prosecdef: false,
        provolatile: 'v',
        proconfig: ['search_path=pg_catalog, pg_temp'],
      });
    } finally {
      await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });

  test('the fence sequence re-created while a caller waits in the queue: its grant draws above every earlier fence', async () => {
    const schema = `lh_fn_${uid()}`;
    const ca = await env.client(kind, 6);
    const cb = await env.client(kind, 6);
    const backB = postgres(cb, { schema });
    const A = createLocks(postgres(ca, { schema }), { ttl: '30s', prefix: 'q' });
    const B = createLocks(backB, { ttl: '30s', prefix: 'q' });
    try {
      const a = await A.acquire('k');
      const waiting = B.acquire('k', { wait: '10s' });
      waiting.catch(() => {}); // awaited below
      await queuedPid(env, 'q:k', schema);
      await (await env.admin()).query(`DROP SEQUENCE "${schema}".leasehold_fence_seq`);
      await migrate(ca, { schema });
      await a.release();
      const b = await waiting;
      expect(b.fence > a.fence, `${b.fence} after ${a.fence}`).toBe(true);
      // granted out of the queue (the function let go and the wait began again), not by an attempt
      expect(backB.stats.queueGrants).toBe(1);
      await b.release();
    } finally {
      await Promise.all([A.close(), B.close()]);
      await (await env.admin()).query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });
});
