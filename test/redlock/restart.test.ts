/**
 * Documents the one fault Redlock cannot absorb by itself: a node that restarts empty (no
 * persistence) and rejoins at once. Then a second client is granted a lock that the first still
 * holds, with a fence no higher than the first's. The delayed-restart rule (stay down for the
 * longest TTL, then re-seed the fence counters before taking traffic) prevents both.
 * Ports 7121..7123, owned by this file.
 */
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { redlock, reseedFences } from '../../src/backends/redlock/index.js';
import { type AnyClient, clients, closeClients, eventually, Node, raw, startNodes, token } from './nodes.js';

const PORTS = [7121, 7122, 7123];
let nodes: Node[] = [];
const owned: { backends: Backend[]; clients: AnyClient[] } = { backends: [], clients: [] };

async function backend() {
  const cs = await clients('ioredis', PORTS);
  const b = redlock(cs);
  owned.clients.push(...cs);
  owned.backends.push(b);
  return { b, cs };
}

/**
 * Holder A, granted by nodes 1 and 2 only (an outsider held the key on node 3 at that moment, as
 * if node 3 had been slow or partitioned). Five earlier grants set the counters to 5; A's fence,
 * 6, was written back to nodes 1 and 2, never to node 3.
 */
async function holderOnNodes12(key: string, ttlMs: number) {
  const { b: a, cs } = await backend();
  for (let i = 0; i < 5; i++) {
    const t = token();
    await a.acquire(key, { token: t, ttlMs: 10_000 });
    await a.release(key, t);
  }
  await raw(cs[2]!, 'SET', `{${key}}`, 'outsider', 'PX', '60000');
  const t = token();
  const start = performance.now();
  const g = await a.acquire(key, { token: t, ttlMs });
  const validUntil = start + ttlMs - (Math.round(ttlMs * 0.01) + 2);
  expect(g!.fence).toBe(6n);
  await raw(cs[2]!, 'DEL', `{${key}}`);
  expect(BigInt(String(await raw(cs[2]!, 'GET', `{${key}}:fence`)))).toBeLessThan(6n);
  return { a, token: t, fence: g!.fence, validUntil, cs };
}

beforeEach(async () => {
  nodes = await startNodes(PORTS);
});
afterEach(async () => {
  for (const b of owned.backends.splice(0)) await b.close();
  await closeClients(owned.clients.splice(0));
  await Promise.all(nodes.map((n) => n.destroy()));
});

describe('a node restarted empty', () => {
  it('rejoining at once: a second holder is granted the held lock, with a lower-or-equal fence', async () => {
    const A = await holderOnNodes12('job', 60_000);
    await nodes[1]!.restartEmpty(); // node 2 forgets A's lock and its counter
    const { b } = await backend();
    const gB = await b.acquire('job', { token: token(), ttlMs: 60_000 });
    // Node 1 refused (A holds it); nodes 2 (empty) and 3 (never had it) granted: a majority.
    expect(gB).not.toBeNull();
    expect(performance.now()).toBeLessThan(A.validUntil); // A still holds by its own clock
    expect(gB!.fence).toBeLessThanOrEqual(A.fence); // and the fence went backwards
    // A learns only at its next renewal.
    expect(await A.a.extend([{ key: 'job', token: A.token, ttlMs: 60_000 }])).toEqual([false]);
  });

  it('the delayed-restart rule: down for the longest TTL, re-seeded, then rejoin: no overlap, fences increase', async () => {
    const ttlMs = 1_500;
    const A = await holderOnNodes12('job', ttlMs);
    const { b: early, cs: earlyClients } = await backend(); // a contender connected before the crash
    await nodes[1]!.kill();
    // While node 2 stays down, A's lock lives on node 1 alone; nobody else can get a majority.
    expect(await early.acquire('job', { token: token(), ttlMs })).toBeNull();
    expect(performance.now()).toBeLessThan(A.validUntil);
    await closeClients(earlyClients); // drops its queued command to node 2 (no stale SET on restart)
    // Stay down until every lock it may have held has expired (here: A's key on node 1).
    await eventually(async () => (await raw(A.cs[0]!, 'EXISTS', '{job}')) === 0, 10_000, "A's TTL");
    // Restart refusing lock traffic, copy the counters up from the others, then open.
    await nodes[1]!.start(['--requirepass', 'reseeding']);
    const target = new Redis({ host: '127.0.0.1', port: PORTS[1]!, password: 'reseeding' });
    target.on('error', () => {});
    const { raised } = await reseedFences(target, [A.cs[0]!, A.cs[2]!]);
    expect(raised).toBe(1);
    expect(await target.get('{job}:fence')).toBe('6');
    await target.config('SET', 'requirepass', '');
    target.disconnect();
    // Force a majority of nodes 2 and 3 (the case that went wrong above): an outsider holds node 1.
    await raw(A.cs[0]!, 'SET', '{job}', 'outsider', 'PX', '60000');
    const { b } = await backend();
    const gB = await b.acquire('job', { token: token(), ttlMs: 10_000 });
    expect(gB!.fence).toBeGreaterThan(A.fence);
  });

  it('without the re-seed, the same majority of nodes 2 and 3 repeats an old fence', async () => {
    const ttlMs = 1_500;
    const A = await holderOnNodes12('job', ttlMs);
    await nodes[1]!.kill();
    await eventually(async () => (await raw(A.cs[0]!, 'EXISTS', '{job}')) === 0, 10_000, "A's TTL");
    await nodes[1]!.start();
    await raw(A.cs[0]!, 'SET', '{job}', 'outsider', 'PX', '60000');
    const { b } = await backend();
    const gB = await b.acquire('job', { token: token(), ttlMs: 10_000 });
    // No overlap in time (the delay did that), but the resource would see fence ≤ 6 after 6.
    expect(gB!.fence).toBeLessThanOrEqual(A.fence);
  });
});
