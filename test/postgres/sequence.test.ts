/**
 * The fence sequence dropped by hand and re-created (`migrate()`, or the first use after): every
 * fence drawn from the new sequence is above every earlier one, also on connections that read
 * their epoch before (the session connection, a waiter connection) and in a transaction whose
 * snapshot predates the new sequence (xactLock under REPEATABLE READ).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { createLocks } from '../../src/index.js';
import {
  advisoryKey,
  FenceEpochError,
  lockParts,
  migrate,
  postgres,
  xactLock,
} from '../../src/backends/postgres/index.js';
import { KINDS, Pg } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());

const uid = () => randomUUID().slice(0, 8);

/** Drops the fence sequence of `schema`, then migrates (re-created, mark removed, epoch bumped). */
async function recreateSequence(client: any, schema: string): Promise<void> {
  const admin = await env.admin();
  await admin.query(`DROP SEQUENCE "${schema}".leasehold_fence_seq`);
  await migrate(client, { schema });
}

const increasing = (fences: bigint[]) => fences.every((f, i) => i === 0 || f > fences[i - 1]!);

describe.each(KINDS)('a fence sequence re-created under open connections (%s)', (kind) => {
  test('the session connection draws above every earlier fence (it reads the new epoch)', async () => {
    const schema = `lh_seq_${uid()}`;
    const client = await env.client(kind);
    const locks = createLocks(postgres(client, { schema }), { ttl: '30s', prefix: 'seq' });
    try {
      const fences: bigint[] = [];
      for (let i = 0; i < 5; i++) {
        const l = await locks.acquire('k');
        fences.push(l.fence);
        await l.release();
      }
      await recreateSequence(client, schema);
      for (let i = 0; i < 3; i++) {
        const l = await locks.acquire('k');
        fences.push(l.fence);
        await l.release();
      }
      expect(increasing(fences), fences.join(' ')).toBe(true);
    } finally {
      await locks.close();
      await (await env.admin()).query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });

  test('a waiter connection kept from before draws above every earlier fence', async () => {
    const schema = `lh_seq_${uid()}`;
    const ca = await env.client(kind, 6);
    const cb = await env.client(kind, 6);
    const A = createLocks(postgres(ca, { schema }), { ttl: '30s', prefix: 'seqw' });
    const backB = postgres(cb, { schema });
    const B = createLocks(backB, { ttl: '30s', prefix: 'seqw' });
    try {
      const fences: bigint[] = [];
      /** A holds k, B waits for it in the server's queue (on its waiter connection), A lets go. */
      const handoff = async () => {
        const a = await A.acquire('k');
        fences.push(a.fence);
        const waiting = B.acquire('k', { wait: '10s' });
        await waitUntilQueued('seqw:k', schema);
        await a.release();
        const b = await waiting;
        fences.push(b.fence);
        await b.release();
      };
      await handoff();
      expect(backB.stats.queueGrants).toBe(1);
      await recreateSequence(ca, schema);
      await handoff();
      expect(backB.stats.queueGrants).toBe(2);
      expect(increasing(fences), fences.join(' ')).toBe(true);
    } finally {
      await A.close();
      await B.close();
      await (await env.admin()).query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });
});

/** Resolves when a session waits (not granted) for the lock of `fullKey` in `schema`. */
async function waitUntilQueued(fullKey: string, schema: string): Promise<void> {
  const { classid, objid } = lockParts(advisoryKey(fullKey, schema));
  const admin = await env.admin();
  const until = performance.now() + 5000;
  const waits = `select 1 from pg_locks where locktype = 'advisory' and classid = $1::int8::oid
    and objid = $2::int8::oid and objsubid = 1 and not granted`;
  while (!(await admin.query(waits, [classid, objid])).rowCount) {
    if (performance.now() > until) throw new Error('nobody is waiting for the lock');
  }
}

describe('xactLock in a transaction whose snapshot predates a re-created sequence', () => {
  test('REPEATABLE READ: no fence from the new sequence under the old epoch (FenceEpochError); a new transaction draws above', async () => {
    const schema = `lh_seq_${uid()}`;
    const pool = await env.pool({ max: 3 });
    const fences: bigint[] = [];
    const draw = async (setup: string) => {
      const c = await pool.connect();
      try {
        await c.query(setup);
        return { c, fence: () => xactLock(c, 'k', { schema, prefix: 'seqx' }) };
      } catch (e) {
        c.release();
        throw e;
      }
    };
    try {
      await migrate(pool, { schema });
      for (let i = 0; i < 5; i++) {
        const { c, fence } = await draw('BEGIN');
        fences.push(await fence());
        await c.query('COMMIT');
        c.release();
      }
      // the transaction's snapshot is taken before the sequence is re-created
      const old = await draw('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await old.c.query(`SELECT count(*) FROM "${schema}".leasehold_epoch_mark`);
      await recreateSequence(pool, schema);
      let got: unknown;
      try {
        got = await old.fence();
      } catch (e) {
        got = e;
      } finally {
        await old.c.query('ROLLBACK');
        old.c.release();
      }
      if (typeof got === 'bigint') fences.push(got);
      const { c, fence } = await draw('BEGIN');
      fences.push(await fence());
      await c.query('COMMIT');
      c.release();
      expect(increasing(fences), fences.join(' ')).toBe(true);
      expect(got).toBeInstanceOf(FenceEpochError);
    } finally {
      await (await env.admin()).query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });
});
