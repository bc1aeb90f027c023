/**
 * Compile-time checks, enforced by `npm run typecheck` (this file is never run): the backends
 * accept the clients' real types and reject wrong arguments. Each `@ts-expect-error` fails the
 * type-check if the line below it compiles. The packed-tarball check (scripts/check-pack.ts)
 * repeats these against the built declarations, in projects with only one client installed.
 */
import { Cluster, Redis } from 'ioredis';
import pg from 'pg';
import postgresJs from 'postgres';
import { createClient, createCluster } from 'redis';
import { createLocks } from '../../src/index.js';
import { fencedSet, redis } from '../../src/backends/redis/index.js';
import { redlock } from '../../src/backends/redlock/index.js';
import { checkFence, migrate, postgres, tryXactLock, xactLock } from '../../src/backends/postgres/index.js';

export async function accepted(): Promise<void> {
  const io = new Redis();
  const nr = createClient();
  createLocks(redis(io));
  createLocks(redis(new Cluster([{ host: '127.0.0.1', port: 7301 }])));
  createLocks(redis(nr));
  createLocks(redis(createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7301' }] })));
  createLocks(redlock([io, new Redis(7002), nr]));
  await fencedSet(io, 'k', 'v', 1n);
  await fencedSet(nr, 'k', 'v', 1n);

  const pool = new pg.Pool();
  const sql = postgresJs();
  createLocks(postgres(pool));
  createLocks(postgres(sql));
  await migrate(pool);
  await migrate(sql, { schema: 'locks' });
  const client = await pool.connect();
  await xactLock(client, 'k');
  await tryXactLock(new pg.Client(), 'k');
  await checkFence(client, 'r', 1n);
  await sql.begin(async (tx) => {
    await xactLock(tx, 'k');
    await checkFence(tx, 'r', 1n);
  });
  // a reserved connection on which the caller ran BEGIN (docs/postgres.md)
  const reserved = await sql.reserve();
  await reserved`BEGIN`;
  await xactLock(reserved, 'k');
  await tryXactLock(reserved, 'k');
  await checkFence(reserved, 'r', 1n);
  reserved.release();
}

export async function rejected(): Promise<void> {
  // @ts-expect-error a pg Pool is not a Redis client
  redis(new pg.Pool());
  // @ts-expect-error a URL is not a client (that is fromUrl)
  redis('redis://127.0.0.1:6379');
  // @ts-expect-error an options object is not a client
  redis({ host: '127.0.0.1' });
  // @ts-expect-error a client is required
  redis(undefined);
  // @ts-expect-error redlock takes a list of clients
  redlock(new Redis());
  // @ts-expect-error every entry must be a Redis client
  redlock([new Redis(), new Redis(7002), new pg.Pool()]);
  // @ts-expect-error fencedSet needs a Redis client
  void fencedSet(new pg.Pool(), 'k', 'v', 1n);

  // @ts-expect-error a Redis client is not a Postgres pool
  postgres(new Redis());
  // @ts-expect-error a single pg Client is not a Pool (postgres() needs a connection per held lock)
  postgres(new pg.Client());
  // @ts-expect-error a connection string is not a pool (that is fromUrl)
  postgres('postgres://localhost/test');
  // @ts-expect-error migrate needs a pool too
  void migrate(new Redis());
  // @ts-expect-error the Pool is not a transaction: take a client and BEGIN
  void xactLock(new pg.Pool(), 'k');
  // @ts-expect-error the root sql is not a transaction: use sql.begin(tx => …)
  void xactLock(postgresJs(), 'k');
  // @ts-expect-error a reserved connection is one connection, not the pool postgres() needs
  postgres(await postgresJs().reserve());
  // @ts-expect-error checkFence runs inside the caller's transaction
  void checkFence(new Redis(), 'r', 1n);
}
