/**
 * The server settings of leasehold's own connections (the session and its waiter connections),
 * read on those very connections (a pg pool hands out its clients: the test asks them), whatever
 * the user's pool set.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { postgres } from '../../src/backends/postgres/index.js';
import { createLocks } from '../../src/index.js';
import { Pg } from './support.js';

const env = new Pg();
afterAll(() => env.closeAll());

/** The pool's clients as they are handed out (one is the session, others waiter connections). */
function handedOut(pool: pg.Pool): Map<number, pg.PoolClient> {
  const clients = new Map<number, pg.PoolClient>();
  pool.on('acquire', (c) => clients.set((c as unknown as { processID: number }).processID, c));
  return clients;
}

const SETTINGS = `select current_setting('tcp_keepalives_idle') as idle,
  current_setting('tcp_keepalives_interval') as interval, current_setting('tcp_keepalives_count') as count`;

test('the session connection sets TCP keepalives (a vanished client host lets go of its locks in ~8 s)', async () => {
  const pool = await env.pool({ max: 3 });
  const clients = handedOut(pool);
  const backend = postgres(pool);
  const locks = createLocks(backend, { prefix: `set-${randomUUID().slice(0, 8)}` });
  try {
    await locks.acquire('k');
    const session = clients.get(backend.sessionPid!)!;
    expect((await session.query(SETTINGS)).rows[0]).toEqual({ idle: '5', interval: '1', count: '3' });
  } finally {
    await locks.close();
  }
});
