/**
 * Liveness of Redlock acquires on healthy nodes (issue #10, item 4), against the shared nodes
 * 7001..7005 — some behind an in-process TCP proxy that delays or holds replies:
 *   - an event-loop stall in the client during an acquire ends in a grant, not a QuorumError;
 *   - a short-TTL acquire judges its own deadline, never the nodes for its neighbours;
 *   - the clean-up of a failed attempt never deletes the copy a later attempt of the same token
 *     holds (the delayed-reply straggler);
 *   - close() waits for the clean-up of copies that a node granted late.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { redlock, type RedlockOptions } from '../../src/backends/redlock/index.js';
import { createLocks, LeaseLostError, QuorumError } from '../../src/index.js';
import { Proxy } from '../faults/proxy.js';
import {
  type AnyClient,
  clients,
  closeClients,
  eventually,
  type Kind,
  raw,
  requireShared,
  SHARED_PORTS,
  token,
  tokenOf,
} from './nodes.js';

const run = crypto.randomUUID().slice(0, 8);
const key = (k: string) => `lh-live-${run}:${k}`;
/** Blocks this thread (the event loop with it) for `ms`: a GC pause or a busy synchronous section. */
const stall = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const open: { backends: Backend[]; clients: AnyClient[]; proxies: Proxy[] } = {
  backends: [],
  clients: [],
  proxies: [],
};
let admin: AnyClient[];

beforeAll(async () => {
  await requireShared();
  admin = await clients('ioredis', SHARED_PORTS);
});
afterEach(async () => {
  for (const b of open.backends.splice(0)) await b.close();
  await closeClients(open.clients.splice(0));
  for (const p of open.proxies.splice(0)) await p.close();
});
afterAll(() => closeClients(admin ?? []));

/** A backend over the shared nodes; the nodes listed in `proxied` are reached through a proxy. */
async function backend(kind: Kind, count: number, opts: RedlockOptions = {}, proxied: number[] = []) {
  const proxies = new Map<number, Proxy>();
  for (const i of proxied) {
    const p = new Proxy(SHARED_PORTS[i]!);
    await p.listen();
    proxies.set(i, p);
    open.proxies.push(p);
  }
  const ports = SHARED_PORTS.slice(0, count).map((port, i) => proxies.get(i)?.port ?? port);
  const cs = await clients(kind, ports);
  open.clients.push(...cs);
  const b = redlock(cs, opts);
  open.backends.push(b);
  return { b, cs, proxies };
}

/** How many of the shared nodes hold `k` (by any token). */
const holding = async (k: string, count = 5) =>
  (await Promise.all(admin.slice(0, count).map((c) => raw(c, 'EXISTS', `{${k}}`)))).filter((v) => v === 1).length;

describe.each<Kind>(['ioredis', 'node-redis'])('redlock liveness (%s)', (kind) => {
  it('a 600 ms event-loop stall during an acquire, all 5 nodes healthy: granted within the wait, no QuorumError', async () => {
    const { b } = await backend(kind, 5); // nodeTimeout 500ms: the stall outlasts it
    // The driver itself: one attempt, stalled, is granted (the engine's retry is not needed).
    const t = token();
    const attempt = b.acquire(key(`${kind}:stall-driver`), { token: t, ttlMs: 30_000 });
    stall(600);
    expect(await attempt).not.toBeNull();
    expect(await b.release(key(`${kind}:stall-driver`), t)).toBe(true);
    const locks = createLocks(b, { prefix: `lh-live-${run}` });
    const took: number[] = [];
    for (let i = 0; i < 3; i++) {
      const start = performance.now();
      const pending = locks.acquire(`${kind}:stall-${i}`, { wait: '5s' });
      stall(600); // the commands went out; the replies wait in the socket while we are frozen
      const lease = await pending;
      took.push(performance.now() - start);
      expect(lease.held).toBe(true);
      await lease.release();
    }
    // The nodes were never judged for our own stall: the next grant goes at network speed.
    const start = performance.now();
    const lease = await locks.acquire(`${kind}:after-stall`);
    const after = performance.now() - start;
    await lease.release();
    console.log(
      `[redlock ${kind}] 600ms stall during acquire: granted after ${took.map((t) => t.toFixed(0)).join(', ')}ms; ` +
        `next acquire ${after.toFixed(1)}ms`,
    );
    for (const t of took) expect(t).toBeLessThan(600 + 400);
    expect(after).toBeLessThan(250);
    await locks.close();
  });

  it('a stall longer than the lease validity: the attempt is void (null, not QuorumError) and its copies are given back at once', async () => {
    // driftFactor 0.5: a 2s lease has ~1s of validity, so a 1.2s stall voids the grant while the
    // copies on the nodes still live for another ~0.8s — only the driver's give-back clears them
    const { b } = await backend(kind, 5, { driftFactor: 0.5 });
    const k = key(`${kind}:stall-ttl`);
    const t = token();
    const attempt = b.acquire(k, { token: t, ttlMs: 2_000 });
    stall(1_200);
    const start = performance.now();
    expect(await attempt).toBeNull();
    // the decided nodes' copies before the attempt returns, a node that answered later just after
    await eventually(async () => (await holding(k)) === 0, 500, 'the copies to be given back');
    expect(performance.now() - start).toBeLessThan(500); // well before the copies' own expiry (~800ms)
    // and the next attempt is granted at once
    expect(await b.acquire(k, { token: t, ttlMs: 2_000 })).not.toBeNull();
    expect(await b.release(k, t)).toBe(true);
  });

  it('extend(2) is refused before any I/O; an extend(5) answered after its validity (a stall) says it ran out, not that a node refused', async () => {
    const { b } = await backend(kind, 5);
    const locks = createLocks(b, { ttl: '10s', renew: false });
    const lease = await locks.acquire(key(`${kind}:tiny-extend`));
    await expect(lease.extend(2)).rejects.toThrow(/leaves no validity after the drift allowance/);
    expect(lease.held).toBe(true);
    // 5 ms leave 3 ms after the drift allowance; the client stalls for 30 ms while the nodes answer
    const extending = lease.extend(5).catch((x: unknown) => x);
    stall(30);
    const e = await extending;
    expect(e).toBeInstanceOf(LeaseLostError);
    expect((e as Error).message).toMatch(/extension to 5ms ran out before it was confirmed/);
    expect((e as Error).message).not.toMatch(/refused/);
    expect(lease.held).toBe(false);
    await locks.close();
  });

  it('a 4 ms-TTL acquire does not fail its neighbours (its deadline is its own, not a node timeout)', async () => {
    // Every reply takes 20ms (the proxies): the short attempt can never finish in its 2ms of validity.
    const { b } = await backend(kind, 5, {}, [0, 1, 2, 3, 4]);
    for (const p of open.proxies) p.setMode({ kind: 'delay', ms: 20 });
    const longs: (object | null)[] = [];
    const shorts: unknown[] = [];
    for (let i = 0; i < 10; i++) {
      const short = b.acquire(key(`${kind}:short-${i}`), { token: token(), ttlMs: 4 }).catch((e: unknown) => e);
      await sleep(6); // the short attempt's 2ms deadline has passed on every node
      const t = token();
      const long = await b.acquire(key(`${kind}:long-${i}`), { token: t, ttlMs: 30_000 });
      longs.push(long);
      shorts.push(await short);
      if (long) await b.release(key(`${kind}:long-${i}`), t);
    }
    expect(longs.every((g) => g !== null)).toBe(true);
    // the short attempts fail as "not granted in time", not as an unreachable majority
    for (const s of shorts) expect(s).toBeNull();
    await eventually(async () => (await holding(key(`${kind}:short-9`))) === 0, 3_000, 'short copies given back');
  });

  it('delayed-reply straggler: a failed attempt’s late clean-up never deletes the copy a later attempt of the same token holds', async () => {
    // Node 3 of 3 is reached through a proxy that holds its replies (requests still arrive).
    const { b, proxies } = await backend(kind, 3, { nodeTimeout: 5_000 }, [2]);
    const k = key(`${kind}:straggler`);
    const t = token(); // the engine retries with one token: both attempts below use it
    const ttlMs = 1_000;
    // Attempt 1: an outsider holds nodes 1 and 2, so it fails; node 3 grants, its reply held back.
    for (const c of admin.slice(0, 2)) await raw(c, 'SET', `{${k}}`, 'outsider', 'PX', '60000');
    proxies.get(2)!.setMode({ kind: 'hold' });
    expect(await b.acquire(k, { token: t, ttlMs })).toBeNull();
    await eventually(async () => tokenOf(await raw(admin[2]!, 'GET', `{${k}}`)) === t, 2_000, 'node 3 to grant');
    // Attempt 1's copy on node 3 expires; the outsider leaves.
    await eventually(async () => (await raw(admin[2]!, 'EXISTS', `{${k}}`)) === 0, 3_000, 'the copy to expire');
    for (const c of admin.slice(0, 2)) await raw(c, 'DEL', `{${k}}`);
    // Attempt 2, same token: granted by nodes 1 and 2; node 3 grants too, its reply still held.
    const g = await b.acquire(k, { token: t, ttlMs });
    expect(g).not.toBeNull();
    await eventually(async () => tokenOf(await raw(admin[2]!, 'GET', `{${k}}`)) === t, 2_000, 'node 3 to grant');
    const second = await raw(admin[2]!, 'GET', `{${k}}`);
    // Node 3's replies arrive late and in order: attempt 1's grant (its clean-up is sent), then attempt 2's.
    proxies.get(2)!.setMode({ kind: 'pass' });
    await eventually(
      async () => BigInt(String(await raw(admin[2]!, 'GET', `{${k}}:fence`))) >= g!.fence,
      2_000,
      "node 3 to join attempt 2's grant",
    );
    await sleep(50); // attempt 1's clean-up has long been applied
    expect(await raw(admin[2]!, 'GET', `{${k}}`)).toBe(second);
    // So the lease survives losing one of the nodes that granted it: nobody else gets a majority.
    await raw(admin[0]!, 'DEL', `{${k}}`);
    const other = await backend(kind, 3);
    expect(await other.b.acquire(k, { token: token(), ttlMs })).toBeNull();
    expect(await b.release(k, t)).toBe(true);
  });

  it('close() right after a failed attempt still gives back the copies that nodes granted late', async () => {
    // 3 of 5 nodes behind proxies that hold replies: the attempt fails by node timeout with all 5 granted.
    const { b, proxies, cs } = await backend(kind, 5, { nodeTimeout: 300 }, [0, 1, 2]);
    const k = key(`${kind}:close-cleanup`);
    for (const p of proxies.values()) p.setMode({ kind: 'hold' });
    const err = await b.acquire(k, { token: token(), ttlMs: 30_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QuorumError);
    expect(await holding(k)).toBe(3); // granted on the held nodes; the two answering nodes given back
    const closing = b.close();
    setTimeout(() => {
      for (const p of proxies.values()) p.setMode({ kind: 'pass' });
    }, 50);
    await closing;
    await closeClients(cs); // the process goes away right after close()
    expect(await holding(k)).toBe(0); // 30s TTL: expiry is not what cleared them
  });
});
