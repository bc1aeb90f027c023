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
  tokenOf,
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
    await eventually(async () =>
      (await Promise.all(cs.map((c) => raw(c, 'GET', `{${k}}`)))).every((v) => tokenOf(v) === t1),
    );
    expect(await b.acquire(k, { token: token(), ttlMs: 10_000 })).toBeNull();
    expect(await b.release(k, token())).toBe(false);
    expect(await a.release(k, t1)).toBe(true);
    expect(await a.release(k, t1)).toBe(false);
    const g2 = await b.acquire(k, { token: token(), ttlMs: 10_000 });
    expect(g2!.fence).toBeGreaterThan(g!.fence);
  });

  it('seeds a new counter from the node clock (µs); fences increase from there', async () => {
    const k = key('fence');
    const before = BigInt(Date.now() - 1000) * 1000n;
    const fences: bigint[] = [];
    for (let i = 0; i < 5; i++) {
      const t = token();
      const g = await (i % 2 ? a : b).acquire(k, { token: t, ttlMs: 5_000 });
      fences.push(g!.fence);
      await (i % 2 ? a : b).release(k, t);
    }
    expect(fences[0]! > before).toBe(true);
    for (let i = 1; i < fences.length; i++) expect(fences[i]! > fences[i - 1]!).toBe(true);
    expect(fences[4]! < BigInt(Date.now() + 1000) * 1000n).toBe(true);
    // A grant is complete once a majority stores its fence (in the grant itself, or written back).
    const last = String(fences[4]);
    const stored = await Promise.all(cs.map((c) => raw(c, 'GET', `{${k}}:fence`)));
    expect(stored.filter((s) => s === last).length).toBeGreaterThanOrEqual(Math.floor(count / 2) + 1);
    // an idle counter expires (default fenceIdle 24h)
    const pttl = Number(await raw(cs[0]!, 'PTTL', `{${k}}:fence`));
    expect(pttl).toBeGreaterThan(86_400_000 - 60_000);
    expect(pttl).toBeLessThanOrEqual(86_400_000);
  });

  it('fence counters of idle keys expire (fenceIdle); a renewed lease keeps its counter; the next fence is still higher', async () => {
    const short = redlock(other, { fenceIdle: '1s' });
    try {
      const k = key('idle');
      const t1 = token();
      const g1 = await short.acquire(k, { token: t1, ttlMs: 400 });
      const counters = async () =>
        (await Promise.all(cs.map((c) => raw(c, 'EXISTS', `{${k}}:fence`)))).filter((v) => v === 1).length;
      // held past fenceIdle by renewals: the counter lives as long as the lease
      for (let i = 0; i < 6; i++) {
        await new Promise((r) => setTimeout(r, 200));
        expect(await short.extend([{ key: k, token: t1, ttlMs: 400 }])).toEqual([true]);
      }
      expect(await counters()).toBeGreaterThanOrEqual(Math.floor(count / 2) + 1);
      expect(await short.release(k, t1)).toBe(true);
      // idle: every node drops it within fenceIdle
      await eventually(async () => (await counters()) === 0, 3_000, 'the idle counters to expire');
      const t2 = token();
      const g2 = await short.acquire(k, { token: t2, ttlMs: 400 });
      expect(g2!.fence > g1!.fence).toBe(true); // seeded again from the clock
      await short.release(k, t2);
    } finally {
      await short.close();
    }
  });

  it('a grant with counters in step is one round: one script per node, none after', async () => {
    const k = key('one-round');
    for (let i = 0; i < 3; i++) {
      const t = token();
      await a.acquire(k, { token: t, ttlMs: 5_000 });
      await a.release(k, t);
    }
    const same = await Promise.all(cs.map((c) => raw(c, 'GET', `{${k}}:fence`)));
    await Promise.all(cs.map((c) => raw(c, 'SET', `{${k}}:fence`, String(same[0]))));
    let calls = 0;
    // node-redis scripts go through sendCommand (['EVALSHA', ...]) on a plain client, else evalSha
    const isScript = (args: unknown[]) => !Array.isArray(args[0]) || /^EVAL/i.test(String(args[0][0]));
    const restore = cs.flatMap((c) => {
      const o = c as unknown as Record<string, (...args: unknown[]) => unknown>;
      const names = kind === 'ioredis' ? ['evalsha'] : ['evalSha', 'sendCommand'];
      return names.map((name) => {
        const orig = o[name]!;
        o[name] = function (this: unknown, ...args: unknown[]) {
          if (isScript(args)) calls++;
          return orig.apply(this, args);
        };
        return () => (o[name] = orig);
      });
    });
    try {
      const t = token();
      const g = await a.acquire(k, { token: t, ttlMs: 5_000 });
      expect(g!.fence).toBe(BigInt(String(same[0])) + 1n);
      await eventually(() => calls >= count);
      await new Promise((r) => setTimeout(r, 50)); // a write-back round would have gone out by now
      expect(calls).toBe(count);
      await a.release(k, t);
      expect(calls).toBe(2 * count);
    } finally {
      restore.forEach((r) => r());
    }
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

  it('a queued waiter is woken by the release (one message to its own channel), long before its maxMs', async () => {
    const k = key('wake');
    const t = token();
    await a.acquire(k, { token: t, ttlMs: 20_000 });
    // a waiting attempt: refused, and b's wake channel is registered in the key's waiter queue
    expect(await b.acquire(k, { token: token(), ttlMs: 20_000, queue: true })).toBeNull();
    const ac = new AbortController();
    await b.waitForChange!(k, ac.signal, 15_000); // the first wait subscribes b's channel, and returns
    const wakeups = (b as unknown as { wakeups: { channel: string; waits: { wakes: Map<string, number> } } }).wakeups;
    for (const c of cs) {
      expect(Number(((await raw(c, 'PUBSUB', 'NUMSUB', wakeups.channel)) as unknown[])[1])).toBe(1);
      expect(await raw(c, 'ZRANGE', `{${k}}:q`, '0', '-1')).toEqual([wakeups.channel]);
    }
    const start = performance.now();
    const woken = b.waitForChange!(k, ac.signal, 15_000).then(() => performance.now() - start);
    expect(await a.release(k, t)).toBe(true);
    expect(await woken).toBeLessThan(900); // below the waiter's 1 s refresh bound: the message woke it
    expect(wakeups.waits.wakes.get(k)).toBe(1); // one wake-up, however many nodes sent it
  });

  it('watch: pushed on a grant and on a release, from the nodes, with the holder value in inspect', async () => {
    const k = key('watch');
    let calls = 0;
    const stop = await b.watch!(k, () => calls++);
    try {
      const t = token();
      const g = await a.acquire(k, { token: t, ttlMs: 10_000, value: 'worker-7' });
      await eventually(() => calls > 0, 2_000, 'a push for the grant');
      expect(await b.inspect!(k)).toMatchObject({ key: k, fence: g!.fence, value: 'worker-7' });
      const before = calls;
      expect(await a.release(k, t)).toBe(true);
      await eventually(() => calls > before, 2_000, 'a push for the release');
      expect(await b.inspect!(k)).toBeNull();
    } finally {
      stop();
    }
    const after = calls;
    const t = token();
    await a.acquire(k, { token: t, ttlMs: 10_000 });
    await a.release(k, t);
    await new Promise((r) => setTimeout(r, 50));
    expect(calls).toBe(after); // unsubscribed
  });

  it('list: the locks held under a prefix, as inspect shows them', async () => {
    const base = key('list');
    const t = token();
    const g1 = await a.acquire(`${base}:one`, { token: t, ttlMs: 10_000, value: 'v1' });
    const g2 = await a.acquire(`${base}:two`, { token: t, ttlMs: 10_000 });
    await a.acquire(`${base}x:other`, { token: t, ttlMs: 10_000 });
    const seen = [];
    for await (const info of b.list!(`${base}:`)) seen.push(info);
    seen.sort((x, y) => (x.key < y.key ? -1 : 1));
    expect(seen).toEqual([
      { key: `${base}:one`, fence: g1!.fence, remainingMs: expect.any(Number), value: 'v1' },
      { key: `${base}:two`, fence: g2!.fence, remainingMs: expect.any(Number) },
    ]);
    for (const k of [`${base}:one`, `${base}:two`, `${base}x:other`]) await a.release(k, t);
  });

  it('results: stored on a majority only by the holder, read back with the latest writer winning', async () => {
    const k = key('result');
    const t = token();
    await a.acquire(k, { token: t, ttlMs: 10_000 });
    expect(await b.results!.get(k)).toBeNull();
    expect(await a.results!.put(k, token(), '"not the holder"', 60_000)).toBe(false);
    expect(await a.results!.put(k, t, '"done"', 60_000)).toBe(true);
    expect(await b.results!.get(k)).toBe('"done"');
    await a.release(k, t);
    expect(await a.results!.put(k, t, '"too late"', 60_000)).toBe(false);
    expect(await b.results!.get(k)).toBe('"done"'); // outlives the lock
    // stored with its own expiry on a majority (put answers once a majority has it: a slower
    // node's write may still be on its way)
    const pttls = await Promise.all(cs.map(async (c) => Number(await raw(c, 'PTTL', `{${k}}:result`))));
    expect(pttls.filter((t) => t > 50_000).length, `PTTLs ${pttls.join(', ')}`).toBeGreaterThanOrEqual(
      Math.floor(cs.length / 2) + 1,
    );
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
