/**
 * Quick Postgres numbers (run: `npx tsx bench/pg-quick.ts [iterations]`), loopback server:
 *  1. uncontended acquire+release: raw pg_try_advisory_lock/pg_advisory_unlock on one connection,
 *     the postgres() driver over a pg Pool and over postgres.js, and createLocks() on top;
 *  2. handoff latency (release → the waiter holds the lock): the chosen LISTEN/NOTIFY wake-up,
 *     versus a server-side blocking pg_advisory_lock with lock_timeout (not used by the driver).
 */
import pg from 'pg';
import postgresJs from 'postgres';
import { createLocks } from '../src/index.js';
import { advisoryKey, lockParts, migrate, postgres } from '../src/backends/postgres/index.js';
import { statements } from '../src/backends/postgres/sql.js';

const URL = process.env.LEASEHOLD_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const N = Number(process.argv[2] ?? 2000);
const HANDOFFS = Math.max(50, Math.floor(N / 10));
const run = Math.random().toString(36).slice(2, 8);

function stats(samples: number[], totalMs: number) {
  const s = [...samples].sort((a, b) => a - b);
  const pct = (p: number) => s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
  return {
    ops: Math.round((samples.length / totalMs) * 1000),
    p50: +pct(50).toFixed(3),
    p99: +pct(99).toFixed(3),
  };
}

async function loop(label: string, once: (i: number) => Promise<void>, n = N) {
  for (let i = 0; i < Math.min(200, n); i++) await once(-1 - i); // warm-up
  const samples: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await once(i);
    samples.push(performance.now() - t);
  }
  const r = stats(samples, performance.now() - t0);
  console.log(`${label.padEnd(52)} ${String(r.ops).padStart(6)} ops/s   p50 ${r.p50} ms   p99 ${r.p99} ms`);
  return r;
}

async function uncontended() {
  console.log(`\n== uncontended acquire+release, ${N} sequential ops, one key ==`);
  const raw = new pg.Client({ connectionString: URL });
  await raw.connect();
  const once = new pg.Pool({ connectionString: URL, max: 1 });
  await migrate(once);
  await once.end();
  const k = advisoryKey(`leasehold:bench:${run}:raw`).toString();
  await loop('raw pg_try_advisory_lock + pg_advisory_unlock (pg)', async () => {
    await raw.query('SELECT pg_try_advisory_lock($1::int8)', [k]);
    await raw.query('SELECT pg_advisory_unlock($1::int8)', [k]);
  });
  // the driver's two statements (try-lock + epoch fence; unlock, NOTIFY only when attended), no pool
  const s = statements('"public"');
  const full = `leasehold:bench:${run}:raw-driver-sql`;
  const k2 = advisoryKey(full).toString();
  const pid = String((await raw.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
  await raw.query(s.bumpEpoch);
  const ep = (await raw.query(s.epoch)).rows[0] as { epoch: string; started: string; seq: string };
  const acq = { name: 'lh_quick_acquire', text: s.acquire };
  const rel = { name: 'lh_quick_release', text: s.release };
  await loop("raw, the driver's SQL on one connection (prepared, epoch fence)", async () => {
    const r = await raw.query({ ...acq, values: [k2, full, pid, ep.started, ep.epoch, ep.seq, '0'] });
    if (!/^\d/.test(String(r.rows[0]?.r))) throw new Error('not granted');
    await raw.query({ ...rel, values: [k2, 'leasehold', full] });
  });
  await raw.end();

  // two backends at once below, each holding one connection as its session: room for both, and
  // for their other statements
  const pool = new pg.Pool({ connectionString: URL, max: 3 });
  const sql = postgresJs(URL, { max: 3, onnotice: () => {} });
  for (const [name, client] of [
    ['pg Pool', pool],
    ['postgres.js', sql],
  ] as const) {
    const b = postgres(client);
    const key = `leasehold:bench:${run}:${name}`;
    await loop(`driver acquire + release (${name})`, async (i) => {
      if (!(await b.acquire(key, { token: `t${i}`, ttlMs: 30_000 }))) throw new Error('not granted');
      if (!(await b.release(key, `t${i}`))) throw new Error('not released');
    });
    const locks = createLocks(postgres(client), { ttl: '30s' });
    await loop(`createLocks().tryAcquire + release (${name})`, async () => {
      const lease = await locks.tryAcquire(`bench:${run}:locks:${name}`);
      if (!lease) throw new Error('not granted');
      await lease.release();
    });
    await Promise.all([b.close(), locks.close()]);
  }
  await Promise.all([pool.end(), sql.end()]);
}

/** Two holders pass one key back and forth; each handoff: release call → the waiter holds it. */
async function handoffNotify(kind: 'pg Pool' | 'postgres.js') {
  const clients = [0, 1].map(() =>
    kind === 'pg Pool'
      ? new pg.Pool({ connectionString: URL, max: 3 })
      : postgresJs(URL, { max: 3, onnotice: () => {} }),
  );
  const [a, b] = clients.map((c) => createLocks(postgres(c as never), { ttl: '30s', wait: '10s' }));
  const key = `bench:${run}:handoff:${kind}`;
  let holder = await a!.acquire(key);
  const samples: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < HANDOFFS; i++) {
    const next = i % 2 === 0 ? b! : a!;
    const waiting = next.acquire(key);
    await new Promise((r) => setTimeout(r, 2)); // the waiter is parked (tried, failed, waiting)
    const t = performance.now();
    await holder.release();
    holder = await waiting;
    samples.push(performance.now() - t);
  }
  await holder.release();
  const r = stats(samples, performance.now() - t0);
  console.log(`${`LISTEN/NOTIFY handoff via createLocks (${kind})`.padEnd(52)} p50 ${r.p50} ms   p99 ${r.p99} ms`);
  await Promise.all([a!.close(), b!.close()]);
  await Promise.all(clients.map((c: any) => c.end()));
}

/**
 * The alternative: the waiter blocks on the server in pg_advisory_lock under lock_timeout. If the
 * timeout fires just as the lock is granted, Postgres reports the timeout but the session lock
 * may be held: after a 55P03 the waiter checks pg_locks and unlocks (the documented race).
 */
async function handoffBlocking() {
  const conns = await Promise.all(
    [0, 1].map(async () => {
      const c = new pg.Client({ connectionString: URL });
      await c.connect();
      await c.query(`SET lock_timeout = '10s'`);
      return c;
    }),
  );
  const k = advisoryKey(`leasehold:bench:${run}:blocking`).toString();
  const lockBlocking = async (c: pg.Client) => {
    try {
      await c.query('SELECT pg_advisory_lock($1::int8)', [k]);
    } catch (e) {
      if ((e as { code?: string }).code !== '55P03') throw e;
      const { classid, objid } = lockParts(BigInt(k));
      await c.query(
        `SELECT pg_advisory_unlock($1::int8) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'
           AND classid = $2::int8::oid AND objid = $3::int8::oid AND objsubid = 1 AND granted`,
        [k, classid, objid],
      );
      throw e;
    }
  };
  await lockBlocking(conns[0]!);
  let holder = 0;
  const samples: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < HANDOFFS; i++) {
    const next = 1 - holder;
    const waiting = lockBlocking(conns[next]!);
    await new Promise((r) => setTimeout(r, 2));
    const t = performance.now();
    await conns[holder]!.query('SELECT pg_advisory_unlock($1::int8)', [k]);
    await waiting;
    samples.push(performance.now() - t);
    holder = next;
  }
  await conns[holder]!.query('SELECT pg_advisory_unlock($1::int8)', [k]);
  const r = stats(samples, performance.now() - t0);
  console.log(
    `${'blocking pg_advisory_lock handoff (raw, one conn each)'.padEnd(52)} p50 ${r.p50} ms   p99 ${r.p99} ms`,
  );
  await Promise.all(conns.map((c) => c.end()));
}

async function main() {
  console.log(`leasehold postgres quick bench — ${new Date().toISOString()} — node ${process.version}`);
  await uncontended();
  console.log(`\n== handoff latency, ${HANDOFFS} handoffs (release call → waiter holds) ==`);
  await handoffNotify('pg Pool');
  await handoffNotify('postgres.js');
  await handoffBlocking();
  const admin = new pg.Client({ connectionString: URL });
  await admin.connect();
  await admin.query('DELETE FROM leasehold_fences WHERE starts_with(key, $1)', [`leasehold:bench:${run}:`]);
  await admin.end();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
