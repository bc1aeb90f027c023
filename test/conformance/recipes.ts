/**
 * The seed's recipes as part of the one conformance suite: election, observe, run-once,
 * idempotency, holder values and listing. No backend may skip these.
 */
import { expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { InvalidArgumentError, type LeaderInfo, type Locks, type LocksOptions } from '../../src/index.js';
import type { Spy } from './spy.js';
import type { ConformanceTarget } from './suite.js';

export interface RecipeContext {
  target: ConformanceTarget;
  prefix: string;
  key(): string;
  full(k: string): string;
  locks(opts?: LocksOptions): Promise<Locks & { spy: Spy }>;
  raw(): Promise<Backend>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const json = (v: unknown) => JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? String(x) : x));

/** Pulls the next observation that is not an empty seat (between two terms one may see null). */
async function nextLeader(it: AsyncIterator<LeaderInfo | null>): Promise<{ leader: LeaderInfo; at: number }> {
  for (;;) {
    const r = await it.next();
    if (r.done) throw new Error('observe() ended');
    if (r.value) return { leader: r.value, at: performance.now() };
  }
}

export function recipes({ key, locks }: RecipeContext): void {
  test('recipe: election — one leader at a time, resign hands over with a higher fence', async () => {
    const name = key();
    const a = (await locks()).elect(name, { value: 'node-a' });
    const b = (await locks()).elect(name, { value: 'node-b' });
    const events: string[] = [];
    let demotedWith: unknown;
    a.on('elected', () => events.push('a elected'));
    a.on('demoted', (why) => (events.push('a demoted'), (demotedWith = why)));
    const termA = await a.campaign();
    expect(a.isLeader).toBe(true);
    expect(await b.leader()).toEqual({ value: 'node-a', fence: termA.fence });
    const bCampaign = b.campaign();
    bCampaign.catch(() => {}); // may reject before it is awaited below
    await expect(b.resign()).rejects.toMatchObject({ code: 'LEASEHOLD_NOT_LEADER' });
    await a.resign();
    const termB = await bCampaign;
    expect(termB.fence > termA.fence).toBe(true);
    expect(a.isLeader).toBe(false);
    expect(b.isLeader).toBe(true);
    expect(events).toEqual(['a elected', 'a demoted']);
    expect(demotedWith).toMatchObject({ code: 'LEASEHOLD_NOT_LEADER' });
    expect(await a.leader()).toEqual({ value: 'node-b', fence: termB.fence });
    await termB.release();
    await expect(a.campaign({ bogus: 1 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  test('recipe: elect(name) without options observes; its campaign() is refused', async () => {
    const name = key();
    const l = await locks();
    const observer = l.elect(name);
    const before = l.spy.calls;
    await expect(observer.campaign()).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(l.spy.calls).toBe(before);
    expect(observer.isLeader).toBe(false);
    expect(await observer.leader()).toBeNull();
    expect(() => l.elect(name, { value: 'x', ttl: -1 })).toThrow(InvalidArgumentError);
    expect(() => l.elect(name, { ttl: '5s' } as never)).toThrow(InvalidArgumentError);
    const term = await (await locks()).elect(name, { value: 'node-x' }).campaign();
    expect(await observer.leader()).toEqual({ value: 'node-x', fence: term.fence });
    await term.release();
  });

  test('recipe: an observer sees each new leader within 100 ms, in order', async () => {
    const name = key();
    const observer = (await locks()).elect(name);
    const ctrl = new AbortController();
    const it = observer.observe({ signal: ctrl.signal });
    expect((await it.next()).value).toBeNull();
    const candidates = await Promise.all(
      ['c0', 'c1', 'c2'].map(async (v) => (await locks({ ttl: '20s' })).elect(name, { value: v })),
    );
    const lags: number[] = [];
    let lastFence = 0n;
    try {
      for (const [i, c] of candidates.entries()) {
        const seen = nextLeader(it);
        seen.catch(() => {}); // may reject before it is awaited below
        const term = await c.campaign();
        const grantedBy = performance.now();
        const { leader, at } = await seen;
        expect(leader).toEqual({ value: `c${i}`, fence: term.fence });
        expect(term.fence > lastFence).toBe(true);
        lastFence = term.fence;
        lags.push(at - grantedBy);
        await c.resign();
      }
      // the seat empties after the last resign: observed as null
      expect((await it.next()).value).toBeNull();
    } finally {
      ctrl.abort();
    }
    for (const lag of lags) expect(lag).toBeLessThanOrEqual(100);
    // the iterator ends once its signal aborts
    expect((await it.next()).done).toBe(true);
  });

  test('recipe: run-once — 3 instances, one run per window; the window outlives close()', async () => {
    const k = key();
    const instances = await Promise.all([locks(), locks(), locks()]);
    let runs = 0;
    const t0 = performance.now();
    const results = await Promise.all(
      instances.map((l) =>
        l.runExclusive(
          k,
          async () => {
            runs++;
            await sleep(30);
            return 'report';
          },
          { lockAtLeastFor: 1500, lockAtMostFor: '10s' },
        ),
      ),
    );
    expect(runs).toBe(1);
    const winner = results.findIndex((r) => r.ran);
    expect(results[winner]).toEqual({ ran: true, value: 'report' });
    expect(results.filter((r) => !r.ran)).toHaveLength(2);
    // the runner's process goes away; the window is kept by the backend, not by the process
    await instances[winner]!.close();
    const others = instances.filter((_, i) => i !== winner);
    for (const l of others) expect(await l.runExclusive(k, () => runs++)).toEqual({ ran: false });
    expect(runs).toBe(1);
    // after the window the next run happens
    const lease = await others[0]!.acquire(k, { wait: '10s' });
    const at = performance.now() - t0;
    expect(at).toBeGreaterThanOrEqual(1400);
    expect(at).toBeLessThan(1500 + 5000);
    await lease.release();
    expect(await others[1]!.runExclusive(k, () => 'next window')).toEqual({ ran: true, value: 'next window' });
  });

  test('recipe: idempotency — 20 concurrent calls run fn once, all get its stored result; a failed fn stores nothing', async () => {
    const k = key();
    const callers = await Promise.all(Array.from({ length: 5 }, () => locks()));
    let runs = 0;
    const job = async () => {
      runs++;
      await sleep(20);
      return { charged: 42, at: 'once' };
    };
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => callers[i % 5]!.idempotent(k, job, { ttl: '1m', wait: '20s' })),
    );
    expect(runs).toBe(1);
    for (const r of results) expect(r).toEqual({ charged: 42, at: 'once' });
    expect(await callers[3]!.idempotent(k, job)).toEqual({ charged: 42, at: 'once' });
    expect(runs).toBe(1);
    // a failing run stores nothing: the next caller runs it again, and its result sticks
    const k2 = key();
    let attempts = 0;
    await expect(
      callers[0]!.idempotent(k2, () => {
        attempts++;
        return Promise.reject(new Error('boom'));
      }),
    ).rejects.toThrow('boom');
    expect(await callers[1]!.idempotent(k2, () => (attempts++, 'second try'))).toBe('second try');
    expect(await callers[2]!.idempotent(k2, () => (attempts++, 'third try'))).toBe('second try');
    expect(attempts).toBe(2);
    await expect(callers[0]!.idempotent(k2, job, { ttl: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  test('recipe: inspect and list show the holder value, never the token', async () => {
    const base = key();
    const a = await locks();
    const one = await a.acquire(`${base}:one`, { value: 'worker-1' });
    const two = await a.acquire(`${base}:two`);
    const other = await a.acquire(key(), { value: 'elsewhere' });
    expect(await a.inspect(`${base}:one`)).toMatchObject({ key: `${base}:one`, fence: one.fence, value: 'worker-1' });
    const seen = [];
    for await (const info of a.list(`${base}:`)) seen.push(info);
    seen.sort((x, y) => (x.key < y.key ? -1 : 1));
    expect(seen).toHaveLength(2);
    expect(seen[0]).toMatchObject({ key: `${base}:one`, fence: one.fence, value: 'worker-1' });
    expect(seen[1]).toMatchObject({ key: `${base}:two`, fence: two.fence });
    expect(seen[1]!.value).toBeUndefined();
    for (const info of seen) if (info.remainingMs >= 0) expect(info.remainingMs).toBeLessThanOrEqual(30_000);
    const text = json(seen);
    for (const l of [one, two, other]) expect(text).not.toContain(l.token);
    await one.release();
    const after = [];
    for await (const info of (await locks()).list(`${base}:`)) after.push(info.key);
    expect(after).toEqual([`${base}:two`]);
    await expect(a.acquire(key(), { value: 42 as never })).rejects.toBeInstanceOf(InvalidArgumentError);
  });
}
