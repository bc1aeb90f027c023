/**
 * No token and no password in anything the library hands back (issue #9.3), hunted after runs
 * with faults on real, password-protected servers: every error thrown, every diagnostics_channel
 * message, `util.inspect(…, { depth: 12, showHidden: true })` and JSON of leases, Locks and
 * backends. Redis: NOSCRIPT (SCRIPT FLUSH), a failover to a read-only replica (ioredis attaches
 * the command's arguments — lease tokens — to every reply error), a killed server. Redlock: a
 * majority killed. Postgres: a cut and a frozen connection, with the password in the URL.
 */
import { randomUUID } from 'node:crypto';
import { inspect } from 'node:util';
import { Redis } from 'ioredis';
import postgresJs from 'postgres';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { postgres } from '../../src/backends/postgres/index.js';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks, fromUrl, type Lease } from '../../src/index.js';
import { Relay } from '../postgres/proxy.js';
import { Node } from '../redlock/nodes.js';
import { eventually } from '../support/freeze.js';
import { freePort } from '../support/ports.js';
import { collectEvents, findSecret, keep, recordTokens, strings } from '../support/secrets.js';

const PASSWORD = `pw-${randomUUID()}`;
const AUTH = ['--requirepass', PASSWORD, '--masterauth', PASSWORD];
const drops: Array<() => unknown> = [];
afterAll(async () => {
  for (const d of drops.splice(0)) {
    try {
      await d();
    } catch {
      /* gone */
    }
  }
});

async function ioredis(port: number, extra = {}): Promise<Redis> {
  const c = new Redis({ host: '127.0.0.1', port, password: PASSWORD, lazyConnect: true, ...extra });
  c.on('error', () => {});
  await c.connect();
  drops.push(() => c.disconnect());
  return c;
}

/** Resolves once `signal` has aborted (at once if it already has). */
const aborted = (signal: AbortSignal) =>
  new Promise<void>((r) => (signal.aborted ? r() : signal.addEventListener('abort', () => r(), { once: true })));

/** Everything worth hunting in: what was kept, the events, leases and Locks as printed. */
function hunt(things: unknown[], tokens: Set<string>): void {
  const found = findSecret(things, [PASSWORD, ...tokens]);
  expect(found).toBeNull();
}

describe('redis, password-protected, with faults', () => {
  let master: Node;
  beforeAll(async () => {
    master = new Node(await freePort());
    await master.start(AUTH);
    drops.push(() => master.destroy());
  });

  test.each(['ioredis', 'node-redis', 'fromUrl'] as const)(
    '%s: NOSCRIPT, failover to a read-only replica, a killed server: no token, no password anywhere',
    async (kind) => {
      await master.ensureUp();
      const admin = await ioredis(master.port, { maxRetriesPerRequest: 1 });
      await admin.call('REPLICAOF', 'NO', 'ONE');
      const tokens = new Set<string>();
      let backend: Backend;
      const url = `redis://:${PASSWORD}@127.0.0.1:${master.port}`;
      if (kind === 'fromUrl') {
        backend = await fromUrl(url);
      } else if (kind === 'ioredis') {
        backend = redis(await ioredis(master.port, { maxRetriesPerRequest: 1 }));
      } else {
        const c = createClient({ url, socket: { reconnectStrategy: () => 50 } });
        c.on('error', () => {});
        await c.connect();
        drops.push(() => c.destroy());
        backend = redis(c);
      }
      const events = collectEvents();
      const kept: unknown[] = [];
      const locks = createLocks(recordTokens(backend, tokens), {
        prefix: `sec-${kind}`,
        ttl: 900,
        opTimeout: 500,
      });
      const leases: Lease[] = [];
      try {
        for (const k of ['a', 'b', 'c', 'd']) leases.push(await locks.acquire(k));
        kept.push(await locks.idempotent('once', () => 42n));
        await keep(kept, locks.acquire('a', { wait: 100 })); // a LockTimeoutError
        await keep(kept, locks.inspect('a'));

        await admin.call('SCRIPT', 'FLUSH'); // NOSCRIPT: the client falls back to EVAL
        await keep(kept, leases[0]!.extend());
        await keep(kept, locks.tryAcquire('e'));

        // failover: our node is now a read-only replica (of a master that stays unreachable, so
        // it keeps its data): every write the library sends is refused with READONLY
        await admin.call('REPLICAOF', '127.0.0.1', String(await freePort()));
        await eventually(async () => /role:slave/.test(await admin.info('replication')), 5000, 'the role change');
        await keep(kept, locks.tryAcquire('f'));
        await keep(kept, locks.acquire('g', { wait: 300 }));
        await keep(kept, leases[1]!.extend());
        await keep(kept, leases[2]!.release());
        // a wait retries READONLY (a failover in progress) until its deadline: a short one here
        await keep(
          kept,
          locks.idempotent('twice', () => 1, { wait: 300 }),
        );
        await keep(
          kept,
          locks.withLock('h', () => 1, { wait: 300 }),
        );
        // renewals fail or are refused: every lease is lost, with events
        await Promise.all(leases.map((l) => aborted(l.signal)));
        kept.push(...leases.map((l) => l.signal.reason));

        await master.kill(); // and a dead server
        await keep(kept, locks.tryAcquire('i'));
        await keep(kept, locks.acquire('j', { wait: 300 }));
        await keep(kept, locks.inspect('a'));
      } finally {
        events.stop();
      }
      const printed = [
        ...leases.map((l) => inspect(l, { depth: 10, showHidden: true })),
        ...leases.map((l) => JSON.stringify(l)),
        inspect(locks, { depth: 10, showHidden: true }),
        inspect(backend, { depth: 10, showHidden: true }),
      ];
      await keep(kept, locks.close());
      // the run did produce what we hunt in: reply errors from the replica, events with errors
      const text = strings(kept)
        .map(([, s]) => s)
        .join('\n');
      expect(text).toMatch(/READONLY/);
      expect(events.messages.some((m) => (m as { error?: unknown }).error !== undefined)).toBe(true);
      expect(tokens.size).toBeGreaterThan(8);
      hunt([kept, events.messages, printed, leases], tokens);
      await master.start(AUTH);
    },
  );
});

describe('redlock, password-protected nodes, a majority killed', () => {
  test('fromUrl with three URLs: errors, events and inspect carry no token and no password', async () => {
    const nodes = [new Node(await freePort()), new Node(await freePort()), new Node(await freePort())];
    await Promise.all(nodes.map((n) => n.start(AUTH)));
    drops.push(...nodes.map((n) => () => n.destroy()));
    const tokens = new Set<string>();
    const backend = await fromUrl(nodes.map((n) => `redis://:${PASSWORD}@127.0.0.1:${n.port}`));
    const events = collectEvents();
    const kept: unknown[] = [];
    const locks = createLocks(recordTokens(backend, tokens), { ttl: 900, opTimeout: 1000 });
    let lease: Lease | undefined;
    try {
      lease = await locks.acquire('r');
      await Promise.all([nodes[0]!.kill(), nodes[1]!.kill()]);
      await keep(kept, locks.tryAcquire('s'));
      await keep(kept, lease.extend());
      await keep(kept, locks.inspect('r'));
      await aborted(lease.signal);
      kept.push(lease.signal.reason);
    } finally {
      events.stop();
    }
    const printed = [inspect(lease, { depth: 10 }), JSON.stringify(lease), inspect(locks, { depth: 10 })];
    await keep(kept, locks.close());
    expect(kept.some((e) => (e as { code?: string })?.code === 'LEASEHOLD_QUORUM')).toBe(true);
    hunt([kept, events.messages, printed], tokens);
  });
});

describe('postgres, a password in the URL', () => {
  test.each(['fromUrl (pg)', 'postgres.js'] as const)(
    '%s: a cut and a frozen connection: errors, events and inspect carry no password',
    async (kind) => {
      const relay = await new Relay().start();
      drops.push(() => relay.close());
      // trust authentication: the server never asks, so the password only lives in the client
      const url = `postgres://postgres:${PASSWORD}@127.0.0.1:${relay.port}/test`;
      let backend: Backend;
      if (kind === 'postgres.js') {
        // fetch_types off: postgres.js's own type query, cut mid-flight, rejects unhandled inside it
        const sql = postgresJs(url, { max: 4, onnotice: () => {}, fetch_types: false });
        drops.push(() => sql.end({ timeout: 1 }));
        backend = postgres(sql, { timeout: '1s' });
      } else {
        backend = await fromUrl(url);
      }
      const tokens = new Set<string>();
      const events = collectEvents();
      const kept: unknown[] = [];
      const locks = createLocks(recordTokens(backend, tokens), { ttl: 900, opTimeout: 800 });
      let lease: Lease | undefined;
      try {
        lease = await locks.acquire('p');
        relay.cut(); // the holding session ends: lost, with the connection's error as cause
        await aborted(lease.signal);
        kept.push(lease.signal.reason);
        relay.freeze();
        await keep(kept, locks.tryAcquire('q'));
        await keep(kept, locks.inspect('p'));
      } finally {
        events.stop();
      }
      const printed = [inspect(lease, { depth: 10 }), inspect(locks, { depth: 10 }), inspect(backend, { depth: 10 })];
      relay.cut();
      await keep(kept, locks.close());
      expect(kept.some((e) => e instanceof Error)).toBe(true);
      hunt([kept, events.messages, printed], tokens);
    },
  );

  test('fromUrl errors: a password with raw "#", "/", "?" or "@", or in a malformed URL, never shows', async () => {
    const secret = 'Sup3r#Sec/ret?x@y';
    const urls = [
      `redis://user:${secret}@127.0.0.1:1/`,
      `postgres://user:${secret}@127.0.0.1:1/db`,
      `redis://user:pa#ss3cret-${PASSWORD}@127.0.0.1:1/`,
      `postgres://user:${PASSWORD}@[bad/db`,
      `redis://:${PASSWORD}@127.0.0.1:1/0?password=${PASSWORD}`,
    ];
    const kept: unknown[] = [];
    for (const u of urls) await keep(kept, fromUrl(u));
    expect(kept.every((e) => e instanceof Error)).toBe(true);
    const found = findSecret(kept, [PASSWORD, 'Sup3r', 'Sec/ret', 'ss3cret']);
    expect(found).toBeNull();
  });
});
