/**
 * Locks.close() at shutdown on a fromUrl Postgres backend (a pool of leasehold's own) with the
 * server out of reach (a black-holed connection, through a TCP proxy). Its advisory locks end
 * with its connections, so the releases need not wait out opTimeout for a server that does not
 * answer (as the etcd and ZooKeeper backends, by the same hook, `Backend.closing()`). On the old
 * code close() took ~10 s here: each release waited opTimeout (5 s), then the backend's close()
 * waited again resetting its connection. With the server answering, close() still releases; on
 * a caller's own pool, nothing is given up (its connections outlive close()).
 */
import pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { postgres } from '../../src/backends/postgres/index.js';
import { createLocks, fromUrl, type Locks } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { took } from '../support/until.js';

const proxies: Proxy[] = [];
const pools: pg.Pool[] = [];
const open: Locks[] = [];
let n = 0;
const key = () => `cu${++n}-${process.pid}`;

afterAll(async () => {
  for (const p of proxies) p.setMode({ kind: 'pass' });
  await Promise.allSettled(open.map((l) => l.close()));
  await Promise.allSettled(pools.map((p) => p.end()));
  await Promise.allSettled(proxies.map((p) => p.close()));
}, 30_000);

async function proxy(): Promise<Proxy> {
  const p = new Proxy(5432);
  await p.listen();
  proxies.push(p);
  return p;
}

function pool(port = 5432): pg.Pool {
  const p = new pg.Pool({ host: '127.0.0.1', port, user: 'postgres', database: 'test', max: 4 });
  p.on('error', () => {});
  pools.push(p);
  return p;
}

/** Locks on a pool of the test's own, straight to the server: what is free. */
function observer(): Locks {
  const locks = createLocks(postgres(pool()), { prefix: 'pgcu' });
  open.push(locks);
  return locks;
}

test('close() on our own pool gives a black-holed server up after 1 s, not opTimeout twice', async () => {
  const px = await proxy();
  const locks = createLocks(await fromUrl(`postgres://postgres@127.0.0.1:${px.port}/test`), { prefix: 'pgcu' });
  open.push(locks);
  const k = key();
  const lease = await locks.acquire(k);
  px.setMode({ kind: 'blackhole' });
  const ms = await took(locks.close(), 15_000);
  console.log(`close() took ${Math.round(ms)} ms`);
  expect(ms).toBeLessThan(1000 + 1000); // CLOSE_GRACE_MS, not opTimeout (5 s) twice
  expect(lease.held).toBe(false);
  px.setMode({ kind: 'pass' }); // resets the connections: the server frees the lock with them
  const other = await observer().acquire(k, { wait: '5s' });
  await other.release();
}, 30_000);

test('close() on our own pool with the server answering still releases', async () => {
  const px = await proxy();
  const locks = createLocks(await fromUrl(`postgres://postgres@127.0.0.1:${px.port}/test`), { prefix: 'pgcu' });
  const k = key();
  await locks.acquire(k);
  await locks.close();
  const other = await observer().tryAcquire(k);
  expect(other).not.toBeNull();
  await other!.release();
}, 30_000);

test("a caller's own pool is not given up: a server slower than the grace is waited for", async () => {
  const px = await proxy();
  const p = pool(px.port);
  const locks = createLocks(postgres(p), { prefix: 'pgcu' });
  const k = key();
  await locks.acquire(k);
  px.setMode({ kind: 'delay', ms: 1500 }); // longer than CLOSE_GRACE_MS, within opTimeout
  const ms = await took(locks.close(), 15_000);
  expect(ms).toBeGreaterThan(1500);
  px.setMode({ kind: 'pass' });
  // released (not given up), and the caller's pool still serves
  const other = await observer().tryAcquire(k);
  expect(other).not.toBeNull();
  await other!.release();
  expect((await p.query('select 1 as one')).rows[0].one).toBe(1);
}, 30_000);
