/**
 * Redis session mode: the rare refresh of the long PX of the locks that hang off sessions, on the
 * real server, with leases of TTLs whose locks' PX differ (one session per TTL, in one backend).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { createLocks, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';
import { shortPx } from '../support/redis-session.js';

const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-refresh-${randomUUID().slice(0, 8)}`;
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

const lockKey = (key: string) => `{${prefix}:${key}}`;

describe('redis session mode: lock refresh', () => {
  test("a lease of a long TTL granted first does not hold back the refresh of a shorter TTL's lock", async () => {
    // PX at least 3 s: a 4 s lease's lock has a PX of 12 s (refresh due after 4 s), a 300 ms
    // lease's lock a PX of 3 s (refresh due after 1 s, lost on the server after 3 s without one)
    const admin = await clients.make('ioredis');
    const a = createLocks(shortPx(await clients.make('ioredis'), 3000), { prefix });
    open.push(a);
    const long = await a.acquire('long', { ttl: 4000 });
    const t0 = performance.now();
    const short = await a.acquire('short', { ttl: 300 });
    const value = await admin.get(lockKey('short'));
    expect(value).toContain('|');
    // past the short lock's first PX (3 s from its grant), well before the long lease's refresh
    while (performance.now() < t0 + 3400) await new Promise((r) => setTimeout(r, 100));
    expect(await admin.get(lockKey('short'))).toBe(value);
    expect(await admin.pttl(lockKey('short'))).toBeGreaterThan(0);
    expect(short.held).toBe(true);
    expect(short.signal.aborted).toBe(false);
    const b = createLocks(shortPx(await clients.make('ioredis'), 3000), { prefix });
    open.push(b);
    expect(await b.tryAcquire('short')).toBeNull();
    expect(long.held).toBe(true);
    expect(await short.release()).toBe(true);
    expect(await long.release()).toBe(true);
  });
});
