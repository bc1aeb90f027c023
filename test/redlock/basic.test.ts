/** The driver against the shared nodes 7001..7005, with ioredis and node-redis. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { redlock } from '../../src/backends/redlock/index.js';
import {
  type AnyClient,
  clients,
  eventually,
  closeClients,
  type Kind,
  raw,
  requireShared,
  SHARED_PORTS,
  token,
} from './nodes.js';

const run = crypto.randomUUID().slice(0, 8);

describe.each<[Kind, number]>([
  ['ioredis', 3],
  ['ioredis', 5],
  ['node-redis', 3],
  ['node-redis', 5],
])('redlock basics (%s, %i nodes)', (kind, count) => {
  const ports = SHARED_PORTS.slice(0, count);
  let cs: AnyClient[];
  let other: AnyClient[];
  let a: Backend;
  let b: Backend;
  const key = (k: string) => `lh-test-${run}:${kind}:${count}:${k}`;

  beforeAll(async () => {
    await requireShared(ports);
    cs = await clients(kind, ports);
    other = await clients(kind, ports);
    a = redlock(cs);
    b = redlock(other);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await closeClients([...(cs ?? []), ...(other ?? [])]);
  });

  it('grants, excludes, releases, and stores the lock on every node', async () => {
    const k = key('basic');
    const t1 = token();
    const g = await a.acquire(k, { token: t1, ttlMs: 10_000 });
    expect(g).not.toBeNull();
    // A node answering after the quorum joins the grant a moment later (checked before any
    // contender runs: a contender's SET could reach a slow node before ours does).
    await eventually(async () => (await Promise.all(cs.map((c) => raw(c, 'GET', `{${k}}`)))).every((v) => v === t1));
    expect(await b.acquire(k, { token: token(), ttlMs: 10_000 })).toBeNull();
    expect(await b.release(k, token())).toBe(false);
    expect(await a.release(k, t1)).toBe(true);
    expect(await a.release(k, t1)).toBe(false);
    const g2 = await b.acquire(k, { token: token(), ttlMs: 10_000 });
    expect(g2!.fence).toBeGreaterThan(g!.fence);
  });

  it('writes the fence back to every granting node', async () => {
    const k = key('fence');
    const fences: bigint[] = [];
    for (let i = 0; i < 5; i++) {
      const t = token();
      const g = await (i % 2 ? a : b).acquire(k, { token: t, ttlMs: 5_000 });
      fences.push(g!.fence);
      await (i % 2 ? a : b).release(k, t);
    }
    expect(fences).toEqual([1n, 2n, 3n, 4n, 5n]);
    // Round 2 is decided by a majority. A node that answered later may miss the write-back
    // (the lease was released before its late grant arrived): only the majority is certain.
    const stored = await Promise.all(cs.map((c) => raw(c, 'GET', `{${k}}:fence`)));
    expect(stored.filter((s) => s === '5').length).toBeGreaterThanOrEqual(Math.floor(count / 2) + 1);
  });

  it('takes the max over the granting nodes: a higher counter on any node wins', async () => {
    const k = key('maxfence');
    // All nodes answer (no faults), so the counter set on every node but one is seen by every majority.
    await Promise.all(cs.map((c, i) => raw(c, 'SET', `{${k}}:fence`, String(i === 0 ? 7 : 41))));
    const t = token();
    expect((await a.acquire(k, { token: t, ttlMs: 5_000 }))!.fence).toBe(42n);
    await a.release(k, t);
  });

  it('keeps fences exact past 2^53', async () => {
    const k = key('big');
    await Promise.all(cs.map((c) => raw(c, 'SET', `{${k}}:fence`, '9007199254740993')));
    const t = token();
    expect((await a.acquire(k, { token: t, ttlMs: 5_000 }))!.fence).toBe(9007199254740994n);
    expect((await a.inspect!(k))!.fence).toBe(9007199254740994n);
    await a.release(k, t);
  });

  it('extends many leases in one batch, false for those not ours', async () => {
    const t = token();
    const ks = [key('x1'), key('x2'), key('x3')];
    for (const k of ks) expect(await a.acquire(k, { token: t, ttlMs: 1_000 })).not.toBeNull();
    const res = await a.extend([
      { key: ks[0]!, token: t, ttlMs: 20_000 },
      { key: ks[1]!, token: 'not-the-token', ttlMs: 20_000 },
      { key: ks[2]!, token: t, ttlMs: 20_000 },
      { key: key('never-held'), token: t, ttlMs: 20_000 },
    ]);
    expect(res).toEqual([true, false, true, false]);
    const pttl = Number(await raw(cs[0]!, 'PTTL', `{${ks[0]}}`));
    expect(pttl).toBeGreaterThan(10_000);
    expect(Number(await raw(cs[0]!, 'PTTL', `{${ks[1]}}`))).toBeLessThanOrEqual(1_000);
    for (const k of ks) await a.release(k, t);
    expect(await a.extend([])).toEqual([]);
  });

  it('inspect reports fence and remaining time from a majority, never the token', async () => {
    const k = key('inspect');
    expect(await b.inspect!(k)).toBeNull();
    const t = token();
    const g = await a.acquire(k, { token: t, ttlMs: 8_000 });
    const info = await b.inspect!(k);
    expect(info).not.toBeNull();
    expect(info!.key).toBe(k);
    expect(info!.fence).toBe(g!.fence);
    expect(info!.remainingMs).toBeGreaterThan(6_000);
    expect(info!.remainingMs).toBeLessThanOrEqual(8_000);
    expect(JSON.stringify(info, (_, v) => (typeof v === 'bigint' ? String(v) : v))).not.toContain(t);
    // Held on a minority only (an outsider deleted it elsewhere): not held.
    for (const c of cs.slice(0, Math.floor(count / 2) + 1)) await raw(c, 'DEL', `{${k}}`);
    expect(await b.inspect!(k)).toBeNull();
    await a.release(k, t);
  });

  it('a waiter is woken by the release (pub/sub), long before its maxMs', async () => {
    const k = key('wake');
    const t = token();
    await a.acquire(k, { token: t, ttlMs: 20_000 });
    const ac = new AbortController();
    const start = performance.now();
    const woken = b.waitForChange!(k, ac.signal, 15_000).then(() => performance.now() - start);
    // Release only once the waiter listens: wait until every node reports a subscriber.
    const subscribed = async () => {
      for (const c of cs) {
        const r = (await raw(c, 'PUBSUB', 'NUMSUB', `{${k}}:released`)) as unknown[];
        if (Number(r[1]) < 1) return false;
      }
      return true;
    };
    while (!(await subscribed())) await new Promise((r) => setTimeout(r, 5));
    expect(await a.release(k, t)).toBe(true);
    expect(await woken).toBeLessThan(5_000);
  });

  it('a waiter whose lock was released before it subscribed returns at once', async () => {
    const k = key('lost-wakeup');
    const start = performance.now();
    await b.waitForChange!(k, new AbortController().signal, 15_000);
    expect(performance.now() - start).toBeLessThan(5_000);
  });

  it('waitForChange resolves when its signal aborts, and after maxMs', async () => {
    const k = key('abort');
    const t = token();
    await a.acquire(k, { token: t, ttlMs: 20_000 });
    const ac = new AbortController();
    const p = b.waitForChange!(k, ac.signal, 60_000);
    ac.abort();
    await p;
    const start = performance.now();
    await b.waitForChange!(k, new AbortController().signal, 50);
    expect(performance.now() - start).toBeGreaterThanOrEqual(45);
    await a.release(k, t);
  });
});
