/**
 * Documents the one fault Redlock cannot absorb by itself: a node that restarts empty (no
 * persistence) and rejoins at once. Then a second client is granted a lock that the first still
 * holds. Its fence is still higher than the first's: the restarted node seeds its missing counter
 * from its clock (TIME in µs), which is ahead of every counter seeded earlier. The delayed-restart
 * rule (stay down for the longest TTL, then re-seed the fence counters before taking traffic)
 * prevents the double grant, and keeps fences increasing without relying on clocks.
 * Ports asked of the OS, owned by this file.
 */
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { redlock, reseedFences } from '../../src/backends/redlock/index.js';
import { type AnyClient, clients, closeClients, eventually, Node, raw, startNodes, token } from './nodes.js';
import { freePorts } from '../support/ports.js';

/** Asked of the OS when the file starts (never fixed ports another run may hold). */
let PORTS: number[] = [];
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
 * if node 3 had been slow or partitioned). Five earlier grants brought the counters in step; A's
 * fence, one above the fifth's, is stored on nodes 1 and 2, never on node 3.
 */
async function holderOnNodes12(key: string, ttlMs: number) {
  const { b: a, cs } = await backend();
  for (let i = 0; i < 5; i++) {
    const t = token();
    await a.acquire(key, { token: t, ttlMs: 10_000 });
    await a.release(key, t);
  }
  // the counters of nodes 1 and 2 (each seeded from its own TIME at its first grant: on a loaded
  // machine node 2's may be a few hundred µs ahead of node 1's); A's fence is one above the higher
  const counters = await Promise.all(
    [0, 1].map(async (i) => BigInt(String(await raw(cs[i]!, 'GET', `{${key}}:fence`)))),
  );
  const fifth = counters[0]! > counters[1]! ? counters[0]! : counters[1]!;
  await raw(cs[2]!, 'SET', `{${key}}`, 'outsider', 'PX', '60000');
  const t = token();
  const start = performance.now();
  const g = await a.acquire(key, { token: t, ttlMs });
  const validUntil = start + ttlMs - (Math.round(ttlMs * 0.01) + 2);
  expect(g!.fence).toBe(fifth + 1n);
  await raw(cs[2]!, 'DEL', `{${key}}`);
  // node 3 saw the five earlier grants but not A's. Each node seeds a missing counter from its own
  // TIME at its first grant; on a loaded machine node 3's first grant may run a few ms after node
  // 1's and seed higher, so its counter is put where the scenario says it is
  await raw(cs[2]!, 'SET', `{${key}}:fence`, String(fifth), 'KEEPTTL');
  expect(BigInt(String(await raw(cs[2]!, 'GET', `{${key}}:fence`)))).toBeLessThan(g!.fence);
  return { a, token: t, fence: g!.fence, validUntil, cs };
}

beforeEach(async () => {
  if (PORTS.length === 0) PORTS = await freePorts(3);
  nodes = await startNodes(PORTS);
});
afterEach(async () => {
  for (const b of owned.backends.splice(0)) await b.close();
  await closeClients(owned.clients.splice(0));
  await Promise.all(nodes.map((n) => n.destroy()));
});

describe('a node restarted empty', () => {
  it('rejoining at once: a second holder is granted the held lock — but with a higher fence', async () => {
    const A = await holderOnNodes12('job', 60_000);
    await nodes[1]!.restartEmpty(); // node 2 forgets A's lock and its counter
    const { b } = await backend();
    const gB = await b.acquire('job', { token: token(), ttlMs: 60_000 });
    // Node 1 refused (A holds it); nodes 2 (empty) and 3 (never had it) granted: a majority.
    expect(gB).not.toBeNull();
    expect(performance.now()).toBeLessThan(A.validUntil); // A still holds by its own clock
    // Node 2 seeded its lost counter from its clock: the resource can still tell A's writes from B's.
    expect(gB!.fence).toBeGreaterThan(A.fence);
    expect(gB!.fence).toBeGreaterThan(BigInt(Date.now() - 5_000) * 1000n);
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
    expect(await target.get('{job}:fence')).toBe(String(A.fence));
    expect(Number(await target.pttl('{job}:fence'))).toBeGreaterThan(86_000_000); // expires when idle, like the others
    await target.config('SET', 'requirepass', '');
    target.disconnect();
    // Force a majority of nodes 2 and 3 (the case that went wrong above): an outsider holds node 1.
    await raw(A.cs[0]!, 'SET', '{job}', 'outsider', 'PX', '60000');
    const { b } = await backend();
    const gB = await b.acquire('job', { token: token(), ttlMs: 10_000 });
    expect(gB!.fence).toBeGreaterThan(A.fence);
  });

  it('without the re-seed, the same majority of nodes 2 and 3 still issues a higher fence (node 2 seeds from TIME)', async () => {
    const ttlMs = 1_500;
    const A = await holderOnNodes12('job', ttlMs);
    await nodes[1]!.kill();
    await eventually(async () => (await raw(A.cs[0]!, 'EXISTS', '{job}')) === 0, 10_000, "A's TTL");
    await nodes[1]!.start();
    await raw(A.cs[0]!, 'SET', '{job}', 'outsider', 'PX', '60000');
    const { b } = await backend();
    const gB = await b.acquire('job', { token: token(), ttlMs: 10_000 });
    // No overlap in time (the delay did that). Node 3 never saw A's fence and node 2 lost it; node 2's
    // counter, seeded from its clock in µs, is above every counter seeded before (given sane clocks).
    expect(gB!.fence).toBeGreaterThan(A.fence);
  });
});
