/** The worked example: a versioned UPDATE under 8 concurrent writers loses no update. */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, test } from 'vitest';
import { withOptimisticRetry } from '../../src/recipes/optimistic.js';
import { ConflictError } from '../../src/errors.js';
import { KINDS, Pg } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());
// created lazily inside the tests (not in a hook): a missing server fails every test, none is skipped
let table: Promise<unknown> | null = null;
const accounts = async () =>
  (table ??= (await env.admin()).query(
    'create table if not exists lh_accounts (id text primary key, balance int not null, version int not null)',
  ));

describe.each(KINDS)('optimistic concurrency on Postgres (%s)', (kind) => {
  test('8 concurrent writers doing read → compute → versioned UPDATE lose no update', async () => {
    await accounts();
    const admin = await env.admin();
    const id = randomUUID();
    await admin.query('insert into lh_accounts values ($1, 0, 0)', [id]);
    const client: any = await env.client(kind, 8);
    const query = async (text: string, params: unknown[]) =>
      kind === 'pg' ? (await client.query(text, params)).rows : [...(await client.unsafe(text, params))];
    let conflicts = 0;
    const deposit = (amount: number) =>
      withOptimisticRetry(
        async () => {
          const [row] = await query('select balance, version from lh_accounts where id = $1', [id]);
          await new Promise((r) => setImmediate(r)); // let the other writers read the same version
          const done = await query(
            'update lh_accounts set balance = $3, version = version + 1 where id = $1 and version = $2 returning version',
            [id, row.version, row.balance + amount],
          );
          if (done.length === 0) conflicts++;
          return done.length === 1 ? done[0].version : false;
        },
        { maxAttempts: 200, backoff: { minDelay: 1, maxDelay: 20 } },
      );
    const versions = (
      await Promise.all(Array.from({ length: 8 }, async () => [await deposit(1), await deposit(1), await deposit(1)]))
    ).flat();
    const r = await admin.query('select balance, version from lh_accounts where id = $1', [id]);
    expect(r.rows[0]).toEqual({ balance: 24, version: 24 });
    expect(new Set(versions).size).toBe(24); // every success wrote its own version
    expect(conflicts).toBeGreaterThan(0); // the race really happened
  });

  test('a writer that always loses gets ConflictError and writes nothing', async () => {
    await accounts();
    const admin = await env.admin();
    const id = randomUUID();
    await admin.query('insert into lh_accounts values ($1, 10, 3)', [id]);
    let attempts = 0;
    const err = await withOptimisticRetry(
      async () => {
        attempts++;
        const r = await admin.query(
          'update lh_accounts set balance = 0, version = version + 1 where id = $1 and version = $2',
          [id, 2], // a stale version
        );
        return r.rowCount === 1 ? true : false;
      },
      { maxAttempts: 3, backoff: { minDelay: 1, maxDelay: 2 } },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect(attempts).toBe(3);
    const r = await admin.query('select balance, version from lh_accounts where id = $1', [id]);
    expect(r.rows[0]).toEqual({ balance: 10, version: 3 });
  });
});
