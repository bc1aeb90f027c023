/**
 * Redis that stops answering (issue #9), on a private redis-server this file owns (a free port
 * asked of the OS): frozen with SIGSTOP, or killed and restarted. With ioredis on its default
 * options, ioredis with `maxRetriesPerRequest: null` (BullMQ's setting) and node-redis on its
 * defaults, every call settles by its bound, close() too, and nothing is left held once the
 * server answers again (late grants are released). Then issue #9.2: close() with a call in
 * flight through a slow link leaves no lock behind, for a user's client and for fromUrl.
 */
import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { redis } from '../../src/backends/redis/index.js';
import { ClosedError, createLocks, fromUrl, type Lease, type WarningEvent } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import { Node } from '../redlock/nodes.js';
import { eventually, expectBoundsWhileFrozen, OP, SHORT_TTL, timed } from '../support/freeze.js';
import { freePort } from '../support/ports.js';
import { REDIS_URL } from '../support/redis.js';

type Config = 'ioredis (default options)' | 'ioredis (maxRetriesPerRequest: null)' | 'node-redis';
const CONFIGS: Config[] = ['ioredis (default options)', 'ioredis (maxRetriesPerRequest: null)', 'node-redis'];

let node: Node;
const drops: Array<() => unknown> = [];
beforeAll(async () => {
  node = new Node(await freePort());
  await node.start();
});
afterAll(async () => {
  for (const d of drops.splice(0)) {
    try {
      await d();
    } catch {
      /* gone */
    }
  }
  await node?.destroy();
});

/** A client as a user would make it: the library's README example, no tuning. */
async function client(config: Config, port = node.port): Promise<any> {
  if (config === 'node-redis') {
    const c = createClient({ socket: { host: '127.0.0.1', port } });
    c.on('error', () => {});
    await c.connect();
    drops.push(() => c.destroy());
    return c;
  }
  const c =
    config === 'ioredis (default options)'
      ? new Redis({ host: '127.0.0.1', port, lazyConnect: true })
      : new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: null });
  c.on('error', () => {});
  await c.connect();
  drops.push(() => c.disconnect());
  return c;
}

async function admin(): Promise<Redis> {
  const c = new Redis({ host: '127.0.0.1', port: node.port, lazyConnect: true, maxRetriesPerRequest: 1 });
  c.on('error', () => {});
  await c.connect();
  drops.push(() => c.disconnect());
  return c;
}

async function setUp(config: Config) {
  const prefix = `fz-${randomUUID().slice(0, 8)}`;
  const locks = createLocks(redis(await client(config)), { prefix, opTimeout: OP, ttl: '10s' });
  const held = await locks.acquire('held');
  const short = await locks.acquire('short', { ttl: SHORT_TTL });
  return { prefix, locks, held, short };
}

async function nothingHeld(prefix: string, keys: string[]): Promise<void> {
  const a = await admin();
  await eventually(
    async () => (await Promise.all(keys.map((k) => a.exists(`{${prefix}:${k}}`)))).every((n) => n === 0),
    5000,
    'every late grant to be released',
  );
}

describe.each(CONFIGS)('redis with %s', (config) => {
  test('server frozen (SIGSTOP): every call settles by its bound; nothing is left held after SIGCONT', async () => {
    const { prefix, locks, held, short } = await setUp(config);
    node.stop();
    try {
      const keys = await expectBoundsWhileFrozen(locks, held, short);
      node.cont();
      // the frozen server now runs what it was sent: the late grants, then their releases
      await nothingHeld(prefix, [...keys, 'short']);
    } finally {
      node.cont();
    }
  });

  test('server killed, then restarted: every call settles by its bound; nothing is left held', async () => {
    const { prefix, locks, held, short } = await setUp(config);
    await node.kill();
    try {
      const keys = await expectBoundsWhileFrozen(locks, held, short);
      await node.start();
      // commands the client queued while it reconnected may run now: none may leave a lock
      await nothingHeld(prefix, keys);
    } finally {
      await node.ensureUp();
    }
  });
});

describe.each(CONFIGS)('redis with %s: a wait outlives a restart', (config) => {
  test('server killed while a caller waits, then restarted: the wait gets the lock, with a higher fence', async () => {
    const prefix = `fz-${randomUUID().slice(0, 8)}`;
    const opts = { prefix, opTimeout: OP, ttl: '10s', retry: { minDelay: 20, maxDelay: 100 } };
    const holder = createLocks(redis(await client(config)), opts);
    const waiter = createLocks(redis(await client(config)), opts);
    const held = await holder.acquire('k');
    const failing: WarningEvent[] = [];
    const onWarning = (m: unknown) => {
      if ((m as WarningEvent).code === 'LEASEHOLD_BACKEND_FAILING') failing.push(m as WarningEvent);
    };
    const waits: string[] = [];
    const onWait = (m: unknown) => waits.push((m as { phase: string }).phase);
    subscribe('leasehold:warning', onWarning);
    subscribe('leasehold:wait', onWait);
    try {
      const pending = timed(waiter.acquire('k', { wait: '10s' }));
      await eventually(() => waits.includes('start'), 5000, 'the acquire to wait');
      await node.kill();
      try {
        // its attempts fail (refused, or unanswered within opTimeout) and it waits on
        await eventually(() => failing.length > 0, 5000, 'an attempt to fail');
      } finally {
        await node.start(); // empty: no persistence
      }
      const r = await pending;
      expect(r.error).toBeUndefined();
      const lease = r.value as Lease;
      expect(lease.held).toBe(true);
      expect(lease.fence).toBeGreaterThan(held.fence); // fences survive the lost data (the clock)
      expect(failing[0]!.message).toMatch(/retrying until its wait deadline/);
      await lease.release();
      await nothingHeld(prefix, ['k']);
    } finally {
      unsubscribe('leasehold:warning', onWarning);
      unsubscribe('leasehold:wait', onWait);
      await node.ensureUp();
      await Promise.allSettled([holder.close(), waiter.close()]);
    }
  });
});

describe('close() with a call in flight (issue #9.2)', () => {
  let proxy: Proxy;
  beforeAll(async () => {
    proxy = new Proxy(Number(new URL(REDIS_URL).port || 6379));
    await proxy.listen();
    proxy.setMode({ kind: 'delay', ms: 150 }); // every chunk, both ways: a 300ms round trip
  });
  afterAll(() => proxy?.close());

  const shared = async () => {
    const c = new Redis(REDIS_URL, { lazyConnect: true });
    c.on('error', () => {});
    await c.connect();
    drops.push(() => c.disconnect());
    return c;
  };

  test.each(['ioredis', 'node-redis', 'fromUrl'] as const)(
    '%s: withLock in flight, close(), then the client quits: the late grant was released',
    async (kind) => {
      const prefix = `fz-close-${randomUUID().slice(0, 8)}`;
      const url = `redis://127.0.0.1:${proxy.port}`;
      let backend;
      let quit: () => Promise<unknown> = async () => {};
      if (kind === 'fromUrl') {
        backend = await fromUrl(url); // its close() closes the client it made
      } else {
        const c: any =
          kind === 'ioredis'
            ? new Redis(url, { lazyConnect: true })
            : createClient({ url, socket: { reconnectStrategy: false } });
        c.on('error', () => {});
        await c.connect();
        // QUIT's reply can be cut off by the proxy closing both sides at once: bounded, then dropped
        quit = () =>
          Promise.race([c.quit().catch(() => {}), new Promise((r) => setTimeout(r, 1000))]).finally(() =>
            kind === 'ioredis' ? c.disconnect() : c.destroy(),
          );
        backend = redis(c);
      }
      const locks = createLocks(backend, { prefix, opTimeout: '3s' });
      let ran = false;
      const work = locks.withLock('job', () => (ran = true)).catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 20)); // the acquire is on the wire
      await locks.close();
      await quit();
      expect(await work).toBeInstanceOf(ClosedError);
      expect(ran).toBe(false);
      const a = await shared();
      expect(await a.exists(`{${prefix}:job}`)).toBe(0);
      expect(await a.pttl(`{${prefix}:job}`)).toBe(-2);
    },
  );
});
