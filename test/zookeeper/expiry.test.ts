/**
 * A session the server expires, on leasehold's own client: the client is replaced by a new one
 * (client.ts), and what watched ZooKeeper on the old session must carry on on the new one. The
 * expiry is the classic one: a second client takes over the session (its id and password) and
 * closes it, so the server ends it, and our client is told EXPIRED when it reconnects.
 *
 * On the old code backend.watch() never called `onChange` again after the replace (its watch died
 * with the old client, and the client tells no one), so observe() fell back to its 1 s re-read.
 * A waiter blocked in acquire() already queued again on the new session (covered here too).
 */
import zookeeper from 'node-zookeeper-client';
import { afterEach, describe, expect, test } from 'vitest';
import type { ZookeeperBackend } from '../../src/backends/zookeeper/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { Zk, ZK_HOSTS } from '../support/zookeeper.js';
import { sleep, until } from '../support/until.js';

const zk = new Zk();
const open: Locks[] = [];
let n = 0;
const key = () => `k-${process.pid}-${++n}`;

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await zk.closeAll();
});

async function locksOn(backend: ZookeeperBackend, ttl = 30_000): Promise<Locks> {
  const l = createLocks(backend, { ttl, prefix: 'expiry' });
  open.push(l);
  return l;
}

/**
 * Ends the backend's session on the server: a thief takes it over and closes it (our client may
 * win it back first, reconnecting in between: then again). Resolves once a new one is connected.
 */
async function expire(backend: ZookeeperBackend): Promise<void> {
  const before = backend.sessionId;
  const replaced = () =>
    backend.sessionId !== before && backend.sessionId !== '' && backend.sessionState === 'CONNECTED';
  for (let i = 0; i < 5 && !replaced(); i++) {
    const client = (backend as unknown as { zk: { client: any } }).zk.client;
    const thief = zookeeper.createClient(ZK_HOSTS, {
      sessionTimeout: 30_000,
      sessionId: client.getSessionId(),
      sessionPassword: client.getSessionPassword(),
      retries: 0,
    } as never);
    // our client, reconnecting at once, may take the session back before the thief's handshake
    // is answered: then the thief never connects, and is closed and tried again (left running,
    // it went on taking the session back and forth)
    const connected = await new Promise<boolean>((resolve) => {
      const t = setTimeout(() => resolve(false), 3000);
      thief.once('connected', () => (clearTimeout(t), resolve(true)));
      thief.connect();
    });
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, connected ? 3000 : 0);
      thief.once('disconnected', () => (clearTimeout(t), resolve()));
      thief.close();
    });
    if (connected) await until('a new session', replaced, 3000).catch(() => {});
  }
  expect(replaced()).toBe(true);
}

describe('zookeeper: an expired session replaced (own client)', () => {
  test('backend.watch() goes on reporting changes on the new session', async () => {
    const backend = await zk.backend();
    const other = await locksOn(await zk.backend());
    const k = key();
    let calls = 0;
    const unwatch = await backend.watch(`expiry:${k}`, () => calls++);
    try {
      const first = await other.acquire(k);
      await until('the watch to report a grant', () => calls > 0, 3000);
      await first.release();
      await expire(backend);
      calls = 0;
      const t0 = performance.now();
      const second = await other.acquire(k);
      await until('the watch to report a grant after the replace', () => calls > 0, 3000);
      expect(performance.now() - t0).toBeLessThan(3000);
      // and it is re-armed after that one (a watch fires once)
      calls = 0;
      await second.release();
      await until('the watch to report the release', () => calls > 0, 3000);
    } finally {
      unwatch();
    }
  }, 40_000);

  test('a waiter blocked in acquire() queues again on the new session and gets the lock once it is free', async () => {
    const backend = await zk.backend();
    const waiterLocks = await locksOn(backend);
    const holder = await locksOn(await zk.backend());
    const k = key();
    const held = await holder.acquire(k);
    let granted = 0;
    const waiting = waiterLocks.acquire(k, { wait: '60s' }).then((l) => ((granted = performance.now()), l));
    // handled from the start: a step below that fails leaves it to afterEach's close(), whose
    // ClosedError was otherwise an unhandled rejection hiding the real failure
    waiting.catch(() => {});
    await until('the waiter queued', async () => (await zk.lockNodes(`expiry:${k}`)).length === 2, 5000);
    await expire(backend);
    // its place in line again, on the new session
    await until('the waiter queued again', async () => (await zk.lockNodes(`expiry:${k}`)).length === 2, 3000);
    const released = performance.now();
    await held.release();
    const lease = await Promise.race([waiting, sleep(5000).then(() => null)]);
    expect(lease?.held).toBe(true);
    expect(granted - released).toBeLessThan(2000);
    await lease?.release();
    await waiting.catch(() => {});
  }, 40_000);
});
