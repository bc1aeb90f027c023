/**
 * Fences strictly increase across 1,000 grants, with four contenders (separate backends and
 * clients, ioredis and node-redis) competing on all five nodes, while a different node is frozen
 * every 100 grants so that the majorities, and the counters they write back, keep shifting.
 * Ports asked of the OS, owned by this file.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { redlock } from '../../src/backends/redlock/index.js';
import { type AnyClient, clients, closeClients, type Kind, type Node, raw, startNodes, token } from './nodes.js';
import { freePorts } from '../support/ports.js';

/** Asked of the OS when the file starts (never fixed ports another run may hold). */
let PORTS: number[] = [];
let nodes: Node[] = [];
const cs: AnyClient[] = [];
const backends: Backend[] = [];

beforeAll(async () => {
  if (PORTS.length === 0) PORTS = await freePorts(5);
  nodes = await startNodes(PORTS);
  for (const kind of ['ioredis', 'node-redis', 'ioredis', 'node-redis'] as Kind[]) {
    const c = await clients(kind, PORTS);
    cs.push(...c);
    backends.push(redlock(c, { nodeTimeout: 500 }));
  }
});
afterAll(async () => {
  for (const n of nodes) n.cont();
  for (const b of backends) await b.close();
  await closeClients(cs);
  await Promise.all(nodes.map((n) => n.destroy()));
});

it('1,000 grants: never overlapping, fences strictly increasing', { timeout: 120_000 }, async () => {
  const TOTAL = 1_000;
  const key = 'fenced';
  const fences: bigint[] = [];
  let inside = false;
  let overlaps = 0;
  let frozen = -1;
  const stop = new AbortController();

  const contender = async (b: Backend) => {
    while (fences.length < TOTAL) {
      const t = token();
      const g = await b.acquire(key, { token: t, ttlMs: 5_000 });
      if (!g) {
        await b.waitForChange!(key, stop.signal, 20);
        continue;
      }
      if (inside) overlaps++;
      inside = true;
      fences.push(g.fence);
      // Freezing a node that holds this very lease may leave its release unconfirmed (false):
      // only the holder that rotates skips the check. Nobody else holds the lock meanwhile.
      const rotate = fences.length % 100 === 0 && fences.length < TOTAL;
      if (rotate) {
        if (frozen >= 0) nodes[frozen]!.cont();
        frozen = (frozen + 1) % nodes.length;
        nodes[frozen]!.stop();
      }
      await new Promise((r) => setImmediate(r)); // other contenders get replies while we are inside
      inside = false;
      const released = await b.release(key, t);
      if (!rotate) expect(released).toBe(true);
    }
  };
  await Promise.all(backends.map(contender));
  stop.abort();
  if (frozen >= 0) nodes[frozen]!.cont();

  expect(overlaps).toBe(0);
  expect(fences.length).toBeGreaterThanOrEqual(TOTAL);
  for (let i = 1; i < fences.length; i++) {
    if (fences[i]! <= fences[i - 1]!) throw new Error(`fence ${fences[i]} after ${fences[i - 1]} at grant ${i}`);
  }
  // The last fence handed out is stored (or passed: a failed attempt may count on) on a majority.
  const last = fences[fences.length - 1]!;
  const counters = await Promise.all(cs.slice(0, PORTS.length).map((c) => raw(c, 'GET', `{${key}}:fence`)));
  expect(counters.filter((v) => BigInt(String(v ?? '0')) >= last).length).toBeGreaterThanOrEqual(3);
});
