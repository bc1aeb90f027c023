/**
 * Fencing a resource: a lock alone cannot stop a holder that stalls past its lease (a GC pause,
 * SIGSTOP, a slow network) from writing after the next holder started. Every grant carries a
 * fence that grows per key; the resource remembers the highest fence it accepted and rejects a
 * lower one. Holder A stalls past its TTL, B takes over with a higher fence and writes, then A's
 * late write is rejected with StaleFenceError. The resource is, by URL:
 *   (none)        FenceGate, in memory (your own service's check)
 *   redis://…     fencedSet: check and write in one Redis script (several URLs: Redlock locks, the first node holds the resource)
 *   postgres://…  checkFence inside the transaction that writes the row
 *   sqlite:path   locks in the SQLite file (one host, no server); the resource checks with a FenceGate
 *   etcd://h:p    locks in etcd (each process its own client); the resource checks with a FenceGate
 *
 *   npx tsx examples/fencing.ts
 *   npx tsx examples/fencing.ts postgres://postgres@127.0.0.1:5432/test
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { createLocks, FenceGate, StaleFenceError, type Backend } from 'leasehold';
import { memory, MemoryStore } from 'leasehold/memory';
import { fencedSet, fenceKeyOf, redis, resourceKeyOf } from 'leasehold/redis';
import { redlock } from 'leasehold/redlock';
import { checkFence, postgres } from 'leasehold/postgres';
import { sqlite } from 'leasehold/sqlite';
import { etcd } from 'leasehold/etcd';

const url = process.argv[2] ?? process.env.LEASEHOLD_URL;
const prefix = process.env.LEASEHOLD_PREFIX ?? 'examples';
const resource = `${prefix}:invoice:7`;

/** A lock backend (a new one per call, as each process has its own) and the fenced write. */
interface Setup {
  backend(): Backend;
  write(fence: bigint, body: string): Promise<void>;
  close(): Promise<void>;
}

/** Locks in memory (or from `backend`, e.g. a SQLite file); the resource checks with a FenceGate. */
function inMemory(backend?: () => Backend): Setup {
  const store = new MemoryStore();
  const gate = new FenceGate();
  const rows = new Map<string, string>();
  return {
    backend: backend ?? (() => memory({ store })),
    async write(fence, body) {
      gate.check(resource, fence); // throws StaleFenceError for a fence below the highest seen
      rows.set(resource, body);
    },
    close: async () => {},
  };
}

/** Locks in etcd, a client per backend (as each process has its own); the resource is a FenceGate. */
function inEtcd(hosts: string): Setup {
  const clients: Etcd3[] = [];
  const base = inMemory(() => {
    const c = new Etcd3({ hosts: hosts.split(',').map((h) => `http://${h}`) });
    clients.push(c);
    return etcd(c);
  });
  return { ...base, close: async () => clients.forEach((c) => c.close()) };
}

function inRedis(urls: string[]): Setup {
  const clients = urls.map((u) => new Redis(u));
  return {
    backend: () => (clients.length === 1 ? redis(clients[0]!) : redlock(clients)),
    // check and write in one script: a stale fence writes nothing
    write: (fence, body) => fencedSet(clients[0]!, resource, body, fence),
    async close() {
      await clients[0]!.del(resourceKeyOf(resource), fenceKeyOf(resource)); // tidy up the example's keys
      await Promise.all(clients.map((c) => c.quit()));
    },
  };
}

function inPostgres(connectionString: string): Setup {
  const pool = new pg.Pool({ connectionString });
  return {
    backend: () => postgres(pool),
    async write(fence, body) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await checkFence(client, resource, fence); // StaleFenceError: nothing below is written
        // your table; a temporary one here, so the example leaves nothing behind
        await client.query('CREATE TEMP TABLE IF NOT EXISTS invoices (id text PRIMARY KEY, body text) ON COMMIT DROP');
        await client.query('INSERT INTO invoices VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET body = $2', [
          resource,
          body,
        ]);
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK');
        throw e;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}

const setup = !url
  ? inMemory()
  : url.startsWith('sqlite:')
    ? inMemory(() => sqlite(url.slice('sqlite:'.length))) // each backend its own connection, as processes have
    : url.startsWith('postgres')
      ? inPostgres(url)
      : url.startsWith('etcd://')
        ? inEtcd(url.slice('etcd://'.length).replace(/\/.*$/, ''))
        : inRedis(url.includes(',') ? url.split(',') : [url]);

const a = createLocks(setup.backend(), { prefix, ttl: 500, renew: false }); // A's lease is not renewed: it will stall
const b = createLocks(setup.backend(), { prefix });

const slow = await a.acquire('invoice:7');
console.log(`A: holds invoice:7 with fence ${slow.fence}, then stalls for 800 ms (a GC pause, SIGSTOP)…`);
await sleep(800);
console.log(`A: lease still ours? ${slow.held}`);

const fast = await b.acquire('invoice:7');
console.log(`B: took over with fence ${fast.fence}`);
await setup.write(fast.fence, 'total=120 (by B)');
console.log('B: wrote total=120');

let rejected = false;
try {
  await setup.write(slow.fence, 'total=100 (by A, stale)');
} catch (e) {
  if (!(e instanceof StaleFenceError)) throw e;
  rejected = true;
  console.log(`A: late write rejected: ${e.message}`);
}
await fast.release();
await Promise.all([a.close(), b.close()]);
await setup.close();
if (!rejected || fast.fence <= slow.fence) {
  console.error('FAILED: the stale write was accepted');
  process.exit(1);
}
console.log('ok: the resource kept B’s write and refused A’s stale one');
