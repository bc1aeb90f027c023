/**
 * A connection that cannot be made is reported as itself: the client's error (ECONNREFUSED) is
 * kept as `cause`, no misleading label is added, and no password leaks into the error.
 */
import { createServer } from 'node:net';
import { inspect } from 'node:util';
import pg from 'pg';
import postgresJs from 'postgres';
import { afterAll, describe, expect, test } from 'vitest';
import { BackendError, createLocks, fromUrl } from '../../src/index.js';
import { postgres } from '../../src/backends/postgres/index.js';
import { Pg } from '../postgres/support.js';

/** A loopback port nobody listens on (the OS picked it; we closed it again). */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as { port: number };
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

const SECRET = 'sekret-pw-8472';

function expectRefused(e: unknown): asserts e is BackendError {
  expect(e).toBeInstanceOf(BackendError);
  const err = e as BackendError;
  expect(err.message).toMatch(/ECONNREFUSED/);
  expect((err.cause as { code?: string } | undefined)?.code).toBe('ECONNREFUSED');
}

describe('fromUrl keeps the cause of a refused connection', () => {
  test('redis://', async () => {
    const port = await closedPort();
    const e = await fromUrl(`redis://user:${SECRET}@127.0.0.1:${port}`).catch((x: unknown) => x);
    expectRefused(e);
    expect(e.message).toBe(
      `could not connect to redis://***@127.0.0.1:${port}: connect ECONNREFUSED 127.0.0.1:${port}`,
    );
    expect(inspect(e, { depth: 10 })).not.toContain(SECRET);
    expect(JSON.stringify(e)).not.toContain(SECRET);
  });

  test('postgres://', async () => {
    const port = await closedPort();
    const e = await fromUrl(`postgres://postgres:${SECRET}@127.0.0.1:${port}/test`).catch((x: unknown) => x);
    expectRefused(e);
    expect(e.message).toMatch(/^could not connect to postgres:\/\/\*\*\*@127\.0\.0\.1:\d+\/test: /);
    expect(inspect(e, { depth: 10 })).not.toContain(SECRET);
  });

  test('several redis:// (Redlock), a majority refused: the refused node is named', async () => {
    // one node down of three opens (Redlock goes on with a majority: test/url); two do not
    const port = await closedPort();
    let other = await closedPort();
    while (other === port) other = await closedPort(); // one node twice is refused before connecting
    const e = await fromUrl([
      'redis://127.0.0.1:7001',
      `redis://127.0.0.1:${port}`,
      `redis://127.0.0.1:${other}`,
    ]).catch((x: unknown) => x);
    expectRefused(e);
    expect(e.message).toMatch(new RegExp(`127\\.0\\.0\\.1:(${port}|${other})`));
  });
});

describe('postgres(): a refused connection is not "creating the fence table"', () => {
  const closers: (() => Promise<unknown>)[] = [];
  afterAll(() => Promise.allSettled(closers.map((c) => c())));

  test('pg Pool', async () => {
    const pool = new pg.Pool({ host: '127.0.0.1', port: await closedPort(), user: 'postgres', database: 'test' });
    closers.push(() => pool.end());
    const locks = createLocks(postgres(pool));
    const e = await locks.tryAcquire('refused').catch((x: unknown) => x);
    expectRefused(e);
    expect(e.message).toMatch(/^postgres: connect ECONNREFUSED/);
    await locks.close();
  });

  test('postgres.js', async () => {
    const sql = postgresJs({ host: '127.0.0.1', port: await closedPort(), user: 'postgres', database: 'test' });
    closers.push(() => sql.end({ timeout: 1 }));
    const locks = createLocks(postgres(sql));
    const e = await locks.tryAcquire('refused').catch((x: unknown) => x);
    expectRefused(e);
    expect(e.message).toMatch(/^postgres: connect ECONNREFUSED/);
    await locks.close();
  });

  test('the server refusing the DDL still says so', async () => {
    const db = new Pg();
    closers.push(() => db.closeAll());
    // pg_catalog takes no user tables: the server answers with an error (a severity and a SQLSTATE)
    const locks = createLocks(postgres(await db.pool(), { schema: 'pg_catalog' }));
    const e = await locks.tryAcquire('ddl').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(BackendError);
    expect((e as Error).message).toMatch(/^postgres: creating the fence table: /);
    expect((e as { cause?: { code?: string } }).cause?.code).toMatch(/^[0-9A-Z]{5}$/);
    await locks.close();
  });
});
