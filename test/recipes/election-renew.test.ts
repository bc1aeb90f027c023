/**
 * A term is renewed while held, whatever the Locks' `renew` default: `createLocks(b, { renew:
 * false })` (for leases the caller extends by hand) made every term lapse after one ttl, so a
 * healthy leader was demoted and another candidate elected, over and over. On memory and Redis.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

const TARGETS: Record<string, () => Promise<Backend>> = {
  redis: async () => redis(await clients.make('ioredis')),
  memory: async () => memory({ store: new MemoryStore() }),
};

describe.each(Object.keys(TARGETS))('election on %s', (name) => {
  test('a term is renewed on Locks whose default is renew: false', async () => {
    const locks = createLocks(await TARGETS[name]!(), { prefix: `el-${randomUUID().slice(0, 8)}`, renew: false });
    open.push(locks);
    const election = locks.elect('renewed', { value: 'me', ttl: 600 });
    const demoted: unknown[] = [];
    election.on('demoted', (why) => demoted.push(why));
    const term = await election.campaign();
    await sleep(1500); // two and a half ttls: a term that is not renewed is lost after the first
    expect(demoted).toEqual([]);
    expect(term.held).toBe(true);
    expect(election.isLeader).toBe(true);
    expect(await election.leader()).toEqual({ value: 'me', fence: term.fence });
    await election.resign();
  });
});
