/**
 * A renewal whose answer arrived while the event loop was blocked: Node runs the timers that fell
 * due during the stall before it reads the socket, so the renewal's bound and the lease's deadline
 * used to fire first, with the answer already there. On the real server; the stall is a busy loop
 * in the check phase (where an I/O callback's or an immediate's work would run) started right after
 * the renewal's command is written. The client's socket stops reading from the write until the
 * stall ends, so the answer is not read before the stall (as it would not be had it come a moment
 * later): when the timers fire, it waits in the socket.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, expect, test } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
const open: Locks[] = [];
const prefix = `lh-stall-${randomUUID().slice(0, 8)}`;
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(() => clients.closeAll());

test('a renewal answered during a stall past the old validity keeps the lease (its answer is read, not timed out)', async () => {
  const client = await clients.make('ioredis');
  const admin = await clients.make('ioredis');
  const locks = createLocks(redis(client), { prefix });
  open.push(locks);
  const lease = await locks.acquire('k', { ttl: 400 });
  await lease.extend(); // the extend script is loaded: the renewal is one round trip
  let stalled: { command: string; to: number; oldUntil: number } | null = null;
  let ended!: () => void;
  const done = new Promise<void>((resolve) => (ended = resolve));
  const send = client.sendCommand.bind(client);
  client.sendCommand = (...args: any[]) => {
    const r = send(...args);
    if (!stalled) {
      // the renewal is on the wire: block the loop until 10 ms past the validity it renews (the
      // renewal, sent at least a sixth of the TTL after the last, is good for ≥ 66 ms more)
      const oldUntil = performance.now() + lease.remaining();
      stalled = { command: args[0].name, to: 0, oldUntil };
      client.stream._handle.readStop(); // the answer stays in the kernel's buffer, unread
      setImmediate(() => {
        while (performance.now() < oldUntil + 10);
        stalled!.to = performance.now();
        client.stream._handle.readStart(); // read once the loop polls again
        ended();
      });
    }
    return r;
  };
  await done;
  // the timers that fell due in the stall, and the answer waiting in the socket, are handled
  await new Promise((r) => setTimeout(r, 10));
  client.sendCommand = send;
  expect(stalled!.command).toBe('evalsha');
  expect(stalled!.to).toBeGreaterThan(stalled!.oldUntil);
  expect(lease.signal.reason?.message).toBeUndefined();
  expect(lease.signal.aborted).toBe(false);
  expect(lease.held).toBe(true);
  // and the server still has it for us (a lost lease would have been released)
  expect(await admin.exists(`{${prefix}:k}`)).toBe(1);
  expect(await lease.release()).toBe(true);
});
