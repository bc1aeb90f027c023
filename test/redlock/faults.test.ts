/**
 * Node faults with real processes the test owns (on free ports asked of the OS): killed (SIGKILL) and frozen
 * (SIGSTOP) nodes, a minority and a majority of them.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { redlock } from '../../src/backends/redlock/index.js';
import { LockTimeoutError, QuorumError } from '../../src/errors.js';
import { createLocks } from '../../src/index.js';
import { type AnyClient, clients, closeClients, eventually, type Kind, Node, raw, startNodes, token } from './nodes.js';
import { freePorts } from '../support/ports.js';

/** Asked of the OS when the file starts (never fixed ports another run may hold). */
let PORTS: number[] = [];
let nodes: Node[];
const open: { backends: Backend[]; clients: AnyClient[] } = { backends: [], clients: [] };

beforeAll(async () => {
  if (PORTS.length === 0) PORTS = await freePorts(5);
  nodes = await startNodes(PORTS);
});
afterEach(async () => {
  await Promise.all(nodes.map((n) => n.ensureUp()));
  for (const b of open.backends.splice(0)) await b.close();
  await closeClients(open.clients.splice(0));
});
afterAll(async () => {
  await Promise.all((nodes ?? []).map((n) => n.destroy()));
});

async function backend(kind: Kind, count: number, opts: Parameters<typeof redlock>[1] = {}) {
  const cs = await clients(kind, PORTS.slice(0, count));
  const b = redlock(cs, opts);
  open.clients.push(...cs);
  open.backends.push(b);
  return { b, cs };
}

const held = async (cs: readonly AnyClient[], key: string) =>
  (await Promise.all(cs.map((c) => raw(c, 'EXISTS', `{${key}}`).catch(() => 0)))).filter((v) => v === 1).length;

describe.each<Kind>(['ioredis', 'node-redis'])('redlock faults (%s)', (kind) => {
  it('one node of 3 killed: locks are still granted, excluded and released', async () => {
    const { b: a } = await backend(kind, 3);
    const { b: other } = await backend(kind, 3);
    await nodes[2]!.kill();
    const t = token();
    const g = await a.acquire(`${kind}:k1`, { token: t, ttlMs: 10_000 });
    expect(g).not.toBeNull();
    expect(await other.acquire(`${kind}:k1`, { token: token(), ttlMs: 10_000 })).toBeNull();
    expect(await a.extend([{ key: `${kind}:k1`, token: t, ttlMs: 10_000 }])).toEqual([true]);
    expect(await a.release(`${kind}:k1`, t)).toBe(true);
    const g2 = await other.acquire(`${kind}:k1`, { token: token(), ttlMs: 10_000 });
    expect(g2!.fence).toBeGreaterThan(g!.fence);
  });

  it('a lease held on all 3 nodes survives one of them dying', async () => {
    const { b: a, cs } = await backend(kind, 3);
    const t = token();
    expect(await a.acquire(`${kind}:k2`, { token: t, ttlMs: 10_000 })).not.toBeNull();
    await eventually(async () => (await held(cs, `${kind}:k2`)) === 3, 5000, 'the late node to join the grant');
    await nodes[0]!.kill();
    expect(await a.extend([{ key: `${kind}:k2`, token: t, ttlMs: 10_000 }])).toEqual([true]);
    expect(await a.release(`${kind}:k2`, t)).toBe(true);
  });

  it('two nodes of 5 killed, or two SIGSTOPped: still granted and released, without waiting for them', async () => {
    const { b: a } = await backend(kind, 5, { nodeTimeout: 2_000 });
    const { b: other } = await backend(kind, 5, { nodeTimeout: 2_000 });
    for (const fault of ['kill', 'stop'] as const) {
      await Promise.all(nodes.map((n) => n.ensureUp()));
      if (fault === 'kill') await Promise.all([nodes[1]!.kill(), nodes[3]!.kill()]);
      else [nodes[1]!, nodes[3]!].forEach((n) => n.stop());
      const t = token();
      const start = performance.now();
      const g = await a.acquire(`${kind}:k3-${fault}`, { token: t, ttlMs: 10_000 });
      const grantMs = performance.now() - start;
      expect(g).not.toBeNull();
      expect(grantMs).toBeLessThan(1_000); // far below the 2s node timeout: nobody waited for the dead
      expect(await other.acquire(`${kind}:k3-${fault}`, { token: token(), ttlMs: 10_000 })).toBeNull();
      expect(await a.release(`${kind}:k3-${fault}`, t)).toBe(true);
      expect(await other.acquire(`${kind}:k3-${fault}`, { token: token(), ttlMs: 10_000 })).not.toBeNull();
    }
  });

  it('a majority killed: QuorumError with each node’s cause, and nothing left held', async () => {
    const { b: a, cs } = await backend(kind, 3, { nodeTimeout: 300 });
    await Promise.all([nodes[0]!.kill(), nodes[1]!.kill()]);
    const err = await a.acquire(`${kind}:k4`, { token: token(), ttlMs: 10_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QuorumError);
    const causes = (err as QuorumError).causes;
    expect(causes).toHaveLength(3);
    expect(causes[0]).toBeInstanceOf(Error);
    expect(causes[1]).toBeInstanceOf(Error);
    expect(causes[2]).toBeNull();
    // The surviving node granted, and was given back before acquire returned.
    expect(await raw(cs[2]!, 'EXISTS', `{${kind}:k4}`)).toBe(0);
  });

  it('through createLocks: a majority down — acquire retries within its wait, then rejects with LockTimeoutError caused by the QuorumError', async () => {
    const { b, cs } = await backend(kind, 3, { nodeTimeout: 300 });
    const locks = createLocks(b, { prefix: 'lh' });
    await Promise.all([nodes[0]!.kill(), nodes[1]!.kill()]);
    const start = performance.now();
    const err = await locks.acquire(`${kind}:k8`, { wait: '2s' }).catch((e: unknown) => e);
    const took = performance.now() - start;
    expect(err).toBeInstanceOf(LockTimeoutError);
    expect((err as LockTimeoutError).cause).toBeInstanceOf(QuorumError);
    expect(took).toBeGreaterThanOrEqual(1_990);
    expect(took).toBeLessThan(2_000 + 1_000); // the attempt in flight at the deadline: ≤ one node timeout
    // the surviving node's copies were given back (the last one's reply may come after the decision)
    await eventually(async () => (await raw(cs[2]!, 'EXISTS', `{lh:${kind}:k8}`)) === 0, 2_000, 'the clean-up');
    // tryAcquire makes one attempt: the QuorumError at once
    await expect(locks.tryAcquire(`${kind}:k8`)).rejects.toBeInstanceOf(QuorumError);
    await locks.close();
  });

  it('through createLocks: a majority frozen for a while — acquire is granted once it is back, within its wait', async () => {
    const { b } = await backend(kind, 5, { nodeTimeout: 200 });
    const locks = createLocks(b, { prefix: 'lh' });
    [0, 1, 2].forEach((i) => nodes[i]!.stop());
    const start = performance.now();
    const pending = locks.acquire(`${kind}:k9`, { wait: '10s' });
    setTimeout(() => [0, 1, 2].forEach((i) => nodes[i]!.cont()), 1_000);
    const lease = await pending;
    expect(performance.now() - start).toBeGreaterThanOrEqual(990);
    expect(lease.held).toBe(true);
    await lease.release();
    await locks.close();
  });

  it('a majority SIGSTOPped: QuorumError after the node timeout; late grants are given back', async () => {
    const { b: a, cs } = await backend(kind, 5, { nodeTimeout: 300 });
    [0, 1, 2].forEach((i) => nodes[i]!.stop());
    const start = performance.now();
    const err = await a.acquire(`${kind}:k5`, { token: token(), ttlMs: 30_000 }).catch((e: unknown) => e);
    const took = performance.now() - start;
    expect(err).toBeInstanceOf(QuorumError);
    expect((err as QuorumError).causes.filter((c) => c !== null)).toHaveLength(3);
    expect(took).toBeGreaterThanOrEqual(290);
    expect(took).toBeLessThan(2_000);
    expect(await held(cs.slice(3), `${kind}:k5`)).toBe(0);
    [0, 1, 2].forEach((i) => nodes[i]!.cont());
    // The frozen nodes now run the stale SET NX and grant; the backend takes each grant back
    // (30s TTL: expiry cannot be what clears them).
    await eventually(async () => (await held(cs, `${kind}:k5`)) === 0, 10_000, 'late grants to be released');
  });

  it('close() does not hang on a frozen node, and wakes its waiters', async () => {
    const { b: a } = await backend(kind, 3, { nodeTimeout: 300 });
    const { b: holder } = await backend(kind, 3);
    const t = token();
    expect(await holder.acquire(`${kind}:k7`, { token: t, ttlMs: 10_000 })).not.toBeNull();
    expect(await a.acquire(`${kind}:k7`, { token: token(), ttlMs: 10_000, queue: true })).toBeNull();
    await a.waitForChange!(`${kind}:k7`, new AbortController().signal, 30_000); // subscribes, returns
    // Subscribed on every node: freeze one node, then close.
    const channel = (a as unknown as { wakeups: { channel: string } }).wakeups.channel;
    const numsub = (c: AnyClient) => raw(c, 'PUBSUB', 'NUMSUB', channel) as Promise<unknown[]>;
    expect((await Promise.all(open.clients.slice(0, 3).map(numsub))).every((r) => Number(r[1]) === 1)).toBe(true);
    const waiting = a.waitForChange!(`${kind}:k7`, new AbortController().signal, 30_000);
    nodes[2]!.stop();
    const start = performance.now();
    await a.close();
    await waiting;
    expect(performance.now() - start).toBeLessThan(2_500);
  });

  it('watch with a majority unreachable rejects with QuorumError; with a minority down it works', async () => {
    const { b: a } = await backend(kind, 5, { nodeTimeout: 300 });
    const { b: granter } = await backend(kind, 5, { nodeTimeout: 300 });
    await Promise.all([nodes[0]!.kill(), nodes[1]!.kill()]);
    let calls = 0;
    const stop = await a.watch!(`${kind}:w1`, () => calls++);
    const t = token();
    expect(await granter.acquire(`${kind}:w1`, { token: t, ttlMs: 10_000 })).not.toBeNull();
    await eventually(() => calls > 0, 2_000, 'a push from a surviving node');
    stop();
    await nodes[2]!.kill();
    await expect(a.watch!(`${kind}:w2`, () => {})).rejects.toBeInstanceOf(QuorumError);
  });

  it('release and extend with a majority unreachable throw QuorumError', async () => {
    const { b: a } = await backend(kind, 3, { nodeTimeout: 300 });
    const t = token();
    expect(await a.acquire(`${kind}:k6`, { token: t, ttlMs: 10_000 })).not.toBeNull();
    [0, 1].forEach((i) => nodes[i]!.stop());
    await expect(a.extend([{ key: `${kind}:k6`, token: t, ttlMs: 10_000 }])).rejects.toBeInstanceOf(QuorumError);
    await expect(a.release(`${kind}:k6`, t)).rejects.toBeInstanceOf(QuorumError);
  });
});

describe('grant latency with a frozen node', () => {
  const median = (xs: number[]) => [...xs].sort((p, q) => p - q)[Math.floor(xs.length / 2)]!;
  const cycle = async (b: Backend, key: string) => {
    const t = token();
    const start = performance.now();
    expect(await b.acquire(key, { token: t, ttlMs: 10_000 })).not.toBeNull();
    const ms = performance.now() - start;
    expect(await b.release(key, t)).toBe(true);
    return ms;
  };

  it('one node of 3 SIGSTOPped: the grant time stays close to the fast nodes’ round trip', async () => {
    const { b } = await backend('ioredis', 3, { nodeTimeout: 1_000 });
    for (let i = 0; i < 20; i++) await cycle(b, 'warm'); // JIT, script cache
    const healthy: number[] = [];
    for (let i = 0; i < 100; i++) healthy.push(await cycle(b, 'lat'));
    nodes[1]!.stop();
    const frozen: number[] = [];
    for (let i = 0; i < 100; i++) frozen.push(await cycle(b, 'lat'));
    const [h, f] = [median(healthy), median(frozen)];
    console.log(`grant median: healthy ${h.toFixed(2)}ms, one node frozen ${f.toFixed(2)}ms`);
    expect(f).toBeLessThan(Math.max(3 * h, h + 5));
    expect(Math.max(...frozen)).toBeLessThan(900); // never waited for the 1s node timeout
  });
});
