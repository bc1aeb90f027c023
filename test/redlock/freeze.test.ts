/**
 * Redlock whose nodes stop answering (issue #9): three private redis-server processes on free
 * ports, all frozen with SIGSTOP. With ioredis on its defaults, ioredis with
 * `maxRetriesPerRequest: null` and node-redis, every call through createLocks settles by its
 * bound, close() too, and nothing is left held on any node once they answer again.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, test } from 'vitest';
import { redlock } from '../../src/backends/redlock/index.js';
import { createLocks } from '../../src/index.js';
import { eventually, expectBoundsWhileFrozen, OP, SHORT_TTL } from '../support/freeze.js';
import { freePorts } from '../support/ports.js';
import { type Node, startNodes } from './nodes.js';

type Config = 'ioredis (default options)' | 'ioredis (maxRetriesPerRequest: null)' | 'node-redis';
const CONFIGS: Config[] = ['ioredis (default options)', 'ioredis (maxRetriesPerRequest: null)', 'node-redis'];

let nodes: Node[] = [];
const drops: Array<() => unknown> = [];
beforeAll(async () => {
  nodes = await startNodes(await freePorts(3));
});
afterAll(async () => {
  for (const d of drops.splice(0)) {
    try {
      await d();
    } catch {
      /* gone */
    }
  }
  await Promise.all(nodes.map((n) => n.destroy()));
});

async function client(config: Config, port: number): Promise<any> {
  if (config === 'node-redis') {
    const c = createClient({ socket: { host: '127.0.0.1', port } });
    c.on('error', () => {});
    await c.connect();
    drops.push(() => c.destroy());
    return c;
  }
  const opts = config === 'ioredis (default options)' ? {} : { maxRetriesPerRequest: null };
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, ...opts });
  c.on('error', () => {});
  await c.connect();
  drops.push(() => c.disconnect());
  return c;
}

describe.each(CONFIGS)('redlock with %s', (config) => {
  test('every node frozen (SIGSTOP): every call settles by its bound; nothing is left held after SIGCONT', async () => {
    const prefix = `fz-${randomUUID().slice(0, 8)}`;
    const clients = await Promise.all(nodes.map((n) => client(config, n.port)));
    const locks = createLocks(redlock(clients), { prefix, opTimeout: OP, ttl: '10s' });
    const held = await locks.acquire('held');
    const short = await locks.acquire('short', { ttl: SHORT_TTL });
    for (const n of nodes) n.stop();
    try {
      const keys = await expectBoundsWhileFrozen(locks, held, short);
      for (const n of nodes) n.cont();
      const admins = await Promise.all(nodes.map((n) => client('ioredis (default options)', n.port)));
      await eventually(
        async () => {
          for (const a of admins) {
            for (const k of [...keys, 'short']) if ((await a.exists(`{${prefix}:${k}}`)) !== 0) return false;
          }
          return true;
        },
        5000,
        'every late grant to be released on every node',
      );
    } finally {
      for (const n of nodes) n.cont();
    }
  });
});
