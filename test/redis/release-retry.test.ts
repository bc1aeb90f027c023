/**
 * A release whose call failed (the server out of reach past opTimeout) left the lock held on the
 * server until its TTL; calling release() again answered false ("no longer ours") without a call,
 * although the lock was still ours. Through a TCP proxy that stops passing bytes (a partition), on
 * the real server.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, expect, test } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { BackendError, createLocks } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
const closing: Array<() => unknown> = [];
afterAll(async () => {
  for (const f of closing.splice(0)) await f();
  await clients.closeAll();
});

test('release() after a failed release retries it (token-checked) instead of answering false', async () => {
  const proxy = new Proxy(6379);
  const port = await proxy.listen();
  closing.push(() => proxy.close());
  // a command cut off with its connection is not sent again on the next one (it failed)
  const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false });
  client.on('error', () => {});
  closing.push(() => client.disconnect());
  const admin = await clients.make('ioredis');
  const prefix = `lh-relretry-${randomUUID().slice(0, 8)}`;
  const locks = createLocks(redis(client), { prefix, ttl: '20s', opTimeout: 300 });
  closing.push(() => locks.close());
  const lease = await locks.acquire('k');
  proxy.setMode({ kind: 'blackhole' });
  const first = await lease.release().catch((e: unknown) => e);
  expect(first).toBeInstanceOf(BackendError);
  // the call never reached the server: the lock is still ours there
  expect(await admin.exists(`{${prefix}:k}`)).toBe(1);
  const ready = new Promise((r) => client.once('ready', r));
  proxy.setMode({ kind: 'pass' }); // resets the connection: the client reconnects
  await ready;
  expect(await admin.exists(`{${prefix}:k}`)).toBe(1); // still ours, unrenewed
  expect(await lease.release()).toBe(true);
  expect(await admin.exists(`{${prefix}:k}`)).toBe(0);
  // and from then on it is idempotent: released, no longer ours
  expect(await lease.release()).toBe(false);
  expect(lease.held).toBe(false);
});
