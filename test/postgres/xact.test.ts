/** Transaction mode, fencing at the resource and migrate(), inside real transactions of both clients. */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeEach, describe, expect, test } from 'vitest';
import {
  advisoryKey,
  checkFence,
  FenceEpochError,
  lockParts,
  migrate,
  postgres,
  tryXactLock,
  xactLock,
} from '../../src/backends/postgres/index.js';
import { InvalidArgumentError, StaleFenceError } from '../../src/errors.js';
import type { TransactionLike } from '../../src/backends/postgres/index.js';
import { KINDS, Pg, type ClientKind } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());

const uid = () => randomUUID().slice(0, 8);
type Tx = TransactionLike;

/** Runs `fn` in a transaction of either client; commits if it resolves, rolls back if it throws. */
function inTx<T>(kind: ClientKind, client: any, fn: (tx: Tx) => Promise<T>): Promise<T> {
  if (kind === 'postgres.js') return client.begin(fn);
  return (async () => {
    const c = await client.connect();
    try {
      await c.query('BEGIN');
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (e) {
      await c.query('ROLLBACK');
      throw e;
    } finally {
      c.release();
    }
  })();
}

const q = async (kind: ClientKind, tx: any, text: string, params: unknown[] = []): Promise<any[]> =>
  kind === 'pg' ? (await tx.query(text, params)).rows : [...(await tx.unsafe(text, params))];

/** Resolves when the server shows a session waiting (not granted) for the key's advisory lock. */
async function someoneWaits(fullKey: string): Promise<void> {
  const { classid, objid } = lockParts(advisoryKey(fullKey));
  const admin = await env.admin();
  const until = performance.now() + 5000;
  for (;;) {
    const r = await admin.query(
      `select 1 from pg_locks where locktype = 'advisory' and classid = $1::int8::oid and objid = $2::int8::oid
         and objsubid = 1 and not granted`,
      [classid, objid],
    );
    if (r.rowCount) return;
    if (performance.now() > until) throw new Error('nobody is waiting for the lock');
  }
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe.each(KINDS)('transaction mode (%s)', (kind) => {
  // the tables exist before each test (migrate is idempotent); per test, not beforeAll, so that a
  // missing server fails every test instead of skipping them
  beforeEach(async () => {
    await migrate(await env.admin());
  });

  test('two concurrent transactions on one key serialise: the second waits for the first to commit', async () => {
    const client = await env.client(kind, 4);
    const key = uid();
    const t1Holds = deferred();
    const t1May = deferred();
    let t2Got = false;
    const t1 = inTx(kind, client, async (tx) => {
      const f = await xactLock(tx, key);
      t1Holds.resolve();
      await t1May.promise;
      expect(t2Got).toBe(false);
      return f;
    });
    t1.catch(() => {}); // may reject before it is awaited below
    await t1Holds.promise;
    const t2 = inTx(kind, client, async (tx) => {
      const f = await xactLock(tx, key);
      t2Got = true;
      return f;
    });
    t2.catch(() => {}); // may reject before it is awaited below
    await someoneWaits(`leasehold:${key}`); // t2 is blocked on the server
    t1May.resolve();
    const [f1, f2] = await Promise.all([t1, t2]);
    expect(f2).toBe(f1 + 1n);
  });

  test('8 concurrent read-modify-write transactions under xactLock lose no update', async () => {
    const client = await env.client(kind, 8);
    const key = uid();
    const admin = await env.admin();
    await admin.query('create table if not exists lh_counter (id text primary key, n int not null)');
    await admin.query('insert into lh_counter values ($1, 0)', [key]);
    const fences: bigint[] = [];
    await Promise.all(
      Array.from({ length: 8 }, () =>
        (async () => {
          for (let i = 0; i < 10; i++) {
            await inTx(kind, client, async (tx) => {
              fences.push(await xactLock(tx, key));
              const [row] = await q(kind, tx, 'select n from lh_counter where id = $1', [key]);
              await q(kind, tx, 'update lh_counter set n = $2 where id = $1', [key, row.n + 1]);
            });
          }
        })(),
      ),
    );
    const r = await admin.query('select n from lh_counter where id = $1', [key]);
    expect(r.rows[0].n).toBe(80);
    expect(new Set(fences).size).toBe(80);
  });

  test('tryXactLock, session mode and xactLock exclude each other and share one fence sequence', async () => {
    const client = await env.client(kind, 4);
    const key = uid();
    // a schema of its own: one fence sequence that nothing else in the test run moves
    const schema = `lh_${uid()}`;
    const b = postgres(await env.client(kind, 3), { schema });
    const g = await b.acquire(`leasehold:${key}`, { token: 'session-holder-token-000', ttlMs: 10_000 });
    expect(await inTx(kind, client, (tx) => tryXactLock(tx, key, { schema }))).toBeNull();
    expect(await b.release(`leasehold:${key}`, 'session-holder-token-000')).toBe(true);
    const inside = deferred();
    const done = deferred();
    const t = inTx(kind, client, async (tx) => {
      const f = await tryXactLock(tx, key, { schema });
      inside.resolve();
      await done.promise;
      return f;
    });
    t.catch(() => {}); // may reject before it is awaited below
    await inside.promise;
    expect(await b.acquire(`leasehold:${key}`, { token: 'x', ttlMs: 10_000 })).toBeNull();
    done.resolve();
    const fx = await t;
    expect(fx).toBe(g!.fence + 1n);
    const g2 = await b.acquire(`leasehold:${key}`, { token: 'y', ttlMs: 10_000 });
    expect(g2!.fence).toBe(fx! + 1n);
    await b.close();
    await (await env.admin()).query(`drop schema "${schema}" cascade`);
  });

  test("a runExclusive window (lockAtLeastFor) holds the key against tryXactLock and xactLock, also one that began during xactLock's wait", async () => {
    const client = await env.client(kind, 4);
    const key = uid();
    const full = `leasehold:${key}`;
    const b = postgres(await env.client(kind, 3));
    // a window right away: tryXactLock is refused, xactLock waits until it ends
    const g = await b.acquire(full, { token: 'window-holder-token-0000', ttlMs: 10_000 });
    expect(await b.keep!(full, 'window-holder-token-0000', 1200)).toBe(true);
    let kept = performance.now();
    expect(await inTx(kind, client, (tx) => tryXactLock(tx, key))).toBeNull();
    const f1 = await inTx(kind, client, (tx) => xactLock(tx, key));
    expect(performance.now() - kept).toBeGreaterThanOrEqual(1100);
    expect(f1 > g!.fence).toBe(true);
    // a window that begins while xactLock waits in the server's queue for the holder
    const g2 = await b.acquire(full, { token: 'window-holder-token-1111', ttlMs: 10_000 });
    const t = inTx(kind, client, async (tx) => [await xactLock(tx, key), performance.now()] as const);
    t.catch(() => {}); // awaited below
    await someoneWaits(full);
    expect(await b.keep!(full, 'window-holder-token-1111', 1200)).toBe(true);
    kept = performance.now();
    const [f2, at] = await t;
    expect(at - kept).toBeGreaterThanOrEqual(1100);
    expect(f2 > g2!.fence).toBe(true);
    await b.close();
  });

  test('backends with different schemas are separate namespaces, each with its own locks and fences', async () => {
    const client = await env.client(kind, 4);
    const key = uid();
    const full = `leasehold:${key}`;
    const [sa, sb] = [`lh_${uid()}`, `lh_${uid()}`];
    const a = postgres(await env.client(kind, 3), { schema: sa });
    const b = postgres(await env.client(kind, 3), { schema: sb });
    const ga = await a.acquire(full, { token: 'schema-a-holder-00000000', ttlMs: 10_000 });
    // the other schema's fences are its own sequence's: it does not share the lock either
    const gb = await b.acquire(full, { token: 'schema-b-holder-00000000', ttlMs: 10_000 });
    expect(ga).not.toBeNull();
    expect(gb).not.toBeNull();
    // within a schema, transaction mode and session mode still exclude each other
    expect(await inTx(kind, client, (tx) => tryXactLock(tx, key, { schema: sa }))).toBeNull();
    expect(await inTx(kind, client, (tx) => tryXactLock(tx, key, { schema: sb }))).toBeNull();
    expect(await a.release(full, 'schema-a-holder-00000000')).toBe(true);
    expect(await inTx(kind, client, (tx) => tryXactLock(tx, key, { schema: sa }))).toBe(ga!.fence + 1n);
    // the default schema hashes the key alone (as before); another one its own name with it
    expect(advisoryKey(full, 'public')).toBe(advisoryKey(full));
    expect(advisoryKey(full, sa)).not.toBe(advisoryKey(full));
    expect(await b.release(full, 'schema-b-holder-00000000')).toBe(true);
    await a.close();
    await b.close();
    const admin = await env.admin();
    for (const schema of [sa, sb]) await admin.query(`drop schema "${schema}" cascade`);
  });

  test('ROLLBACK releases the lock; its fence is never issued again (the sequence does not roll back)', async () => {
    const client = await env.client(kind, 4);
    const key = uid();
    const f0 = await inTx(kind, client, (tx) => xactLock(tx, key));
    let rolledBack = 0n;
    await expect(
      inTx(kind, client, async (tx) => {
        rolledBack = await xactLock(tx, key);
        expect(rolledBack > f0).toBe(true);
        throw new Error('abort');
      }),
    ).rejects.toThrow('abort');
    expect(await env.holders(`leasehold:${key}`)).toEqual([]);
    expect((await inTx(kind, client, (tx) => tryXactLock(tx, key)))! > rolledBack).toBe(true);
  });

  test('a connection outside BEGIN that cannot tell (postgres.js reserved, a pg client without its status) is refused by xactLock, tryXactLock and checkFence; nothing is locked, no fence drawn or recorded', async () => {
    const client = await env.client(kind, 4);
    const key = uid();
    const full = `leasehold:${key}`;
    // a schema of its own: its first fence is (1 << 40) + 1 unless a refused call drew one
    const schema = `lh_${uid()}`;
    // pg: a client seen through a wrapper has no getTransactionStatus; postgres.js: sql.reserve()
    const conn = kind === 'pg' ? await client.connect() : await client.reserve();
    const tx: any = kind === 'pg' ? { query: (...a: unknown[]) => conn.query(...a) } : conn;
    const begin = (text: string) => (kind === 'pg' ? conn.query(text) : conn.unsafe(text));
    try {
      for (const f of [xactLock, tryXactLock]) {
        const e = await f(tx, key, { schema }).catch((x: unknown) => x);
        expect(e).toBeInstanceOf(InvalidArgumentError);
        expect((e as Error).message).toMatch(/not inside a transaction/);
      }
      expect(await env.holders(full, schema)).toEqual([]);
      // checkFence too: outside BEGIN the fence would be recorded apart from the write it guards
      const resource = `res-${uid()}`;
      const e = await checkFence(tx, resource, 5n, { schema }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect((e as Error).message).toMatch(/checkFence: the connection is not inside a transaction/);
      const seen = await (await env.admin()).query(`select count(*)::int as n from "${schema}".leasehold_fence_seen`);
      expect(seen.rows[0].n).toBe(0);
      // the schema's first fence: the refused calls drew none (migrate() records the epoch first)
      await migrate(client, { schema });
      expect(await inTx(kind, client, (other) => xactLock(other, uid(), { schema }))).toBe((1n << 40n) + 1n);
      // inside BEGIN the same connection locks, until COMMIT
      await begin('BEGIN');
      expect(await xactLock(tx, key, { schema })).toBe((1n << 40n) + 2n);
      expect(await tryXactLock(tx, uid(), { schema })).toBe((1n << 40n) + 3n);
      expect(await env.holders(full, schema)).toHaveLength(1);
      expect(await inTx(kind, client, (other) => tryXactLock(other, key, { schema }))).toBeNull();
      await checkFence(tx, resource, 5n, { schema }); // inside BEGIN: recorded with the transaction
      await begin('COMMIT');
      expect(await env.holders(full, schema)).toEqual([]);
    } finally {
      conn.release();
      await (await env.admin()).query(`drop schema if exists "${schema}" cascade`);
    }
  });

  test('a COMMIT wakes a session-mode waiter, whose next attempt then succeeds', async () => {
    const client = await env.client(kind, 4);
    const key = uid();
    const full = `leasehold:${key}`;
    const waiter = postgres(await env.client(kind, 3));
    const never = new AbortController().signal;
    const inside = deferred();
    const done = deferred();
    const t = inTx(kind, client, async (tx) => {
      await xactLock(tx, key);
      inside.resolve();
      await done.promise;
    });
    t.catch(() => {}); // may reject before it is awaited below
    await inside.promise;
    expect(await waiter.acquire(full, { token: 'w', ttlMs: 5000, queue: true })).toBeNull();
    await waiter.waitForChange!(full, never, 5000); // subscribes
    expect(await waiter.acquire(full, { token: 'w', ttlMs: 5000, queue: true })).toBeNull();
    const woke = waiter.waitForChange!(full, never, 10_000).then(() => performance.now());
    const t0 = performance.now();
    done.resolve();
    await t;
    expect((await woke) - t0).toBeLessThan(500);
    expect(await waiter.acquire(full, { token: 'w', ttlMs: 5000, queue: true })).not.toBeNull();
    await waiter.close();
  });

  test('checkFence accepts equal and higher fences and rejects a lower one; the stale write rolls back', async () => {
    const client = await env.client(kind, 4);
    const admin = await env.admin();
    await admin.query('create table if not exists lh_docs (id text primary key, body text not null)');
    const resource = `doc:${uid()}`;
    const write = (fence: bigint, body: string) =>
      inTx(kind, client, async (tx) => {
        await q(kind, tx, 'insert into lh_docs values ($1, $2) on conflict (id) do update set body = $2', [
          resource,
          body,
        ]);
        await checkFence(tx, resource, fence);
      });
    await write(5n, 'by holder 5');
    await write(5n, 'by holder 5 again'); // equal passes
    await write(7n, 'by holder 7');
    const err = await write(6n, 'by paused holder 6').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StaleFenceError);
    expect(err).toMatchObject({ resource, fence: 6n, highest: 7n });
    const r = await admin.query('select body from lh_docs where id = $1', [resource]);
    expect(r.rows[0].body).toBe('by holder 7');
    const seen = await admin.query('select fence::text from leasehold_fence_seen where resource = $1', [resource]);
    expect(seen.rows[0].fence).toBe('7');
  });

  test('a paused former holder cannot write after the next holder did (locks + checkFence)', async () => {
    const client = await env.client(kind, 4);
    const key = uid();
    const resource = `acct:${key}`;
    const b1 = postgres(await env.client(kind, 3));
    const b2 = postgres(await env.client(kind, 3));
    const full = `leasehold:${key}`;
    const old = await b1.acquire(full, { token: 'old', ttlMs: 10_000 });
    const pids = await env.holders(full);
    expect(pids).toHaveLength(1);
    await env.terminate(pids[0]!); // old is "paused": its session, and the lock with it, is gone
    const fresh = await b2.acquire(full, { token: 'new', ttlMs: 10_000 });
    expect(fresh!.fence).toBeGreaterThan(old!.fence);
    await inTx(kind, client, (tx) => checkFence(tx, resource, fresh!.fence));
    await expect(inTx(kind, client, (tx) => checkFence(tx, resource, old!.fence))).rejects.toBeInstanceOf(
      StaleFenceError,
    );
    await Promise.all([b1.close(), b2.close()]);
  });

  test('bad input is rejected with InvalidArgumentError before any I/O', async () => {
    const client = await env.client(kind, 2);
    let calls = 0;
    await inTx(kind, client, async (tx: any) => {
      // a counting wrapper over the real transaction
      const spy =
        kind === 'pg'
          ? { query: (...a: unknown[]) => (calls++, tx.query(...a)) }
          : Object.assign((...a: unknown[]) => tx(...a), {
              unsafe: (...a: unknown[]) => (calls++, tx.unsafe(...a)),
            });
      const bad: Array<() => Promise<unknown>> = [
        () => xactLock(spy, ''),
        () => xactLock(spy, 'x'.repeat(1025)),
        () => xactLock(spy, 'é'.repeat(513)),
        () => xactLock(spy, 42 as never),
        () => xactLock(spy, 'nul\u0000key'),
        () => xactLock(spy, 'k', { bogus: 1 } as never),
        () => xactLock(spy, 'k', { prefix: '' }),
        () => xactLock(spy, 'k', { schema: 'no;pe' }),
        () => xactLock(spy, 'k', { channel: 'bad channel' }),
        () => tryXactLock(spy, ''),
        () => tryXactLock(spy, 'k', 'opts' as never),
        () => xactLock(client, 'k'), // the pool / root sql instead of the transaction
        () => xactLock({} as never, 'k'),
        () => checkFence(spy, '', 1n),
        () => checkFence(spy, 'r', -1n),
        () => checkFence(spy, 'r', 1 as never),
        () => checkFence(spy, 'r', 2n ** 63n),
        () => checkFence(spy, 'r', 1n, { schema: 'x', extra: 1 } as never),
      ];
      for (const f of bad) await expect(f()).rejects.toBeInstanceOf(InvalidArgumentError);
      expect(calls).toBe(0);
      if (kind === 'pg') {
        // a client outside any transaction: the lock would be let go as soon as it was taken
        const idle = await client.connect();
        try {
          await expect(xactLock(idle, 'k')).rejects.toThrow(/not inside a transaction/);
        } finally {
          idle.release();
        }
      }
      await xactLock(spy, uid());
      expect(calls).toBeGreaterThan(0); // the spy does count real calls
    });
  });

  test('prefix is checked as createLocks checks it (lone surrogate, NUL, > 256 bytes) before any I/O; the transaction goes on', async () => {
    const client = await env.client(kind, 2);
    let calls = 0;
    await inTx(kind, client, async (tx: any) => {
      const spy =
        kind === 'pg'
          ? { query: (...a: unknown[]) => (calls++, tx.query(...a)) }
          : Object.assign((...a: unknown[]) => tx(...a), {
              savepoint: tx.savepoint,
              unsafe: (...a: unknown[]) => (calls++, tx.unsafe(...a)),
            });
      for (const prefix of ['a\uD800', 'a\uDBFF', 'a\u0000', 'é'.repeat(129), '']) {
        await expect(tryXactLock(spy, 'k', { prefix })).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(xactLock(spy, 'k', { prefix })).rejects.toBeInstanceOf(InvalidArgumentError);
      }
      expect(calls).toBe(0);
      // the longest allowed prefix still locks, and the transaction was not aborted by a bad one
      expect(await tryXactLock(spy, uid(), { prefix: 'é'.repeat(128) })).toEqual(expect.any(BigInt));
    });
  });

  test('first use creates the tables inside the transaction, also concurrently; xactLock first needs migrate() (FenceEpochError, nothing drawn), which records the epoch; migrate() is idempotent', async () => {
    const client = await env.client(kind, 4);
    const schema = `lh_${uid()}`;
    // checkFence works at first use: the tables are created inside its transactions
    await Promise.all(
      Array.from({ length: 3 }, (_, i) => inTx(kind, client, (tx) => checkFence(tx, `r${i}`, 1n, { schema }))),
    );
    // no fence epoch is recorded yet: xactLock would have to record it inside the transaction
    for (const f of [xactLock, tryXactLock]) {
      const e = await inTx(kind, client, (tx) => f(tx, uid(), { schema })).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(FenceEpochError);
      expect((e as FenceEpochError).code).toBe('LEASEHOLD_FENCE_EPOCH');
    }
    await Promise.all([migrate(client, { schema }), migrate(client, { schema })]);
    const fences = await Promise.all(
      Array.from({ length: 3 }, () => inTx(kind, client, (tx) => xactLock(tx, uid(), { schema }))),
    );
    // a new schema's first epoch is 1 and the refused calls drew nothing: (1 << 40) + 1, 2, 3
    expect([...fences].sort()).toEqual([1n, 2n, 3n].map((n) => (1n << 40n) + n));
    await migrate(client, { schema });
    const schema2 = `lh_${uid()}`;
    await Promise.all(Array.from({ length: 4 }, () => migrate(client, { schema: schema2 })));
    const admin = await env.admin();
    const r = await admin.query(
      `select count(*)::int as n from pg_tables where schemaname = any($1) and tablename like 'leasehold_%'`,
      [[schema, schema2]],
    );
    expect(r.rows[0].n).toBe(14); // seven tables each (and the fence sequence)
    await expect(migrate(client, { schema: 'a"b' })).rejects.toBeInstanceOf(InvalidArgumentError);
    await admin.query(`drop schema "${schema}" cascade; drop schema "${schema2}" cascade`);
  });
});
