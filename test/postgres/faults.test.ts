/** Network faults between the holder and the real server, made by a TCP relay (no mocks). */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import postgresJs from 'postgres';
import { afterAll, describe, expect, test } from 'vitest';
import { createLocks, LeaseLostError } from '../../src/index.js';
import { postgres } from '../../src/backends/postgres/index.js';
import { KINDS, Pg } from './support.js';
import { Relay } from './proxy.js';

const env = new Pg();
const relays: Relay[] = [];
afterAll(async () => {
  await Promise.allSettled(relays.map((r) => r.close()));
  await env.closeAll();
});

describe.each(KINDS)('half-open connection (%s)', (kind) => {
  test('a silent network loses the lease within its validity; the server keeps excluding until it sees the session end', async () => {
    const relay = await new Relay().start();
    relays.push(relay);
    let client: any;
    if (kind === 'pg') {
      client = new pg.Pool({ connectionString: relay.url, max: 3, connectionTimeoutMillis: 2000 });
      client.on('error', () => {});
    } else {
      // fetch_types off: postgres.js's own type query on a connection this test cuts would reject unhandled
      client = postgresJs(relay.url, { max: 3, connect_timeout: 2, onnotice: () => {}, fetch_types: false });
    }
    const key = randomUUID().slice(0, 8);
    const lost: string[] = [];
    const b = postgres(client, { timeout: '1s' });
    b.onLost!((k) => lost.push(k));
    const locks = createLocks(b, { ttl: 900 }); // renewal (the probe) every 300ms
    const lease = await locks.acquire(key);
    const [pid] = await env.holders(`leasehold:${key}`);
    expect(pid).toBeGreaterThan(0);

    relay.freeze();
    const t0 = performance.now();
    const reason = await new Promise((r) => lease.signal.addEventListener('abort', () => r(lease.signal.reason)));
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect(performance.now() - t0).toBeLessThan(900 + 150);

    // the server still has the session (and its lock): nobody else may take it yet
    expect(await env.holders(`leasehold:${key}`)).toEqual([pid]);
    const other = createLocks(await env.backend(kind));
    expect(await other.tryAcquire(key)).toBeNull();

    relay.cut(); // the server sees the connection reset and ends the session
    const next = await other.acquire(key, { wait: '10s' });
    expect(next.fence).toBeGreaterThan(lease.fence);
    expect(lost).toEqual([`leasehold:${key}`]);
    await other.close();
    await locks.close();
    if (kind === 'pg') {
      // the abandoned client was destroyed, never pooled again
      expect(client.totalCount - client.idleCount).toBe(0);
      await client.end();
    } else {
      await client.end({ timeout: 1 });
    }
  });
});
