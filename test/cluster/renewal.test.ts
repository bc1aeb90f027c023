/**
 * Renewal on Redis Cluster (issue #18): leases on keys served by different masters stay held
 * past several TTLs, with both clients. Before per-node batching, an ioredis Cluster sent one
 * pipeline with scripts for many slots, it failed, and every lease was lost at its TTL.
 */
import { randomUUID } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { EXTEND_NODE, TRYAGAIN_MS } from '../../src/backends/redis/cluster.js';
import { redis } from '../../src/backends/redis/index.js';
import { slotOf } from '../../src/backends/redis/slots.js';
import { createLocks, type Lease } from '../../src/index.js';
import { healed } from '../support/failover.js';
import { ClusterClients, ownerOf, slotMover } from '../support/cluster.js';
import type { ClientKind } from '../support/redis.js';

const clients = new ClusterClients();
beforeAll(() => healed('cluster'), 300_000);
afterAll(() => clients.closeAll());

/** `n` keys under `prefix` whose locks live on `n` different masters (or spread over all of them). */
async function spreadKeys(admin: any, prefix: string, n: number): Promise<string[]> {
  const byOwner = new Map<string, string[]>();
  for (let i = 0; i < 200; i++) {
    const key = `k${i}`;
    const owner = await ownerOf(admin, `{${prefix}:${key}}`);
    byOwner.set(owner, [...(byOwner.get(owner) ?? []), key]);
  }
  expect(byOwner.size).toBe(3); // the cluster has 3 masters
  const out: string[] = [];
  for (let i = 0; out.length < n; i++) for (const ks of byOwner.values()) if (ks[i] && out.length < n) out.push(ks[i]!);
  return out;
}

describe.each(['ioredis', 'node-redis'] as ClientKind[])('Redis Cluster renewal on %s', (kind) => {
  test('4 leases on keys of different masters, ttl 3s, held past 3 TTLs: none lost', { timeout: 40_000 }, async () => {
    const prefix = `lh-cl-${randomUUID().slice(0, 8)}`;
    const admin = await clients.make('ioredis');
    const keys = await spreadKeys(admin, prefix, 4);
    const locks = createLocks(redis(await clients.make(kind)), { prefix, ttl: '3s' });
    try {
      const leases: Lease[] = [];
      for (const k of keys) leases.push(await locks.acquire(k));
      const lost: string[] = [];
      for (const l of leases) l.signal.addEventListener('abort', () => lost.push(l.key));
      // holding is the point of the test: 3 TTLs and a renewal period more
      await new Promise((r) => setTimeout(r, 10_000));
      expect(lost).toEqual([]);
      expect(leases.map((l) => l.held)).toEqual([true, true, true, true]);
      for (const l of leases) {
        const info = await locks.inspect(l.key);
        expect(info?.fence).toBe(l.fence);
        expect(info!.remainingMs).toBeGreaterThan(0);
      }
      for (const l of leases) expect(await l.release()).toBe(true);
    } finally {
      await locks.close();
    }
  });

  test("a client's keyPrefix: leases on 3 masters are extended (the fast path's ARGV keys carry it)", async () => {
    const prefix = `lh-clkp-${randomUUID().slice(0, 8)}`;
    const kp = 'kp:';
    const admin = await clients.make('ioredis');
    const keys = await spreadKeys(admin, prefix, 3);
    const backend = redis(await clients.make(kind, { keyPrefix: kp }));
    const items = [];
    for (const k of keys) {
      const token = randomUUID();
      expect(await backend.acquire(`${prefix}:${k}`, { token, ttlMs: 1000 })).not.toBeNull();
      items.push({ key: `${prefix}:${k}`, token, ttlMs: 20_000 });
    }
    // the locks are stored under the client's prefix, and the extension reaches them there
    for (const it of items) expect(await admin.pttl(`${kp}{${it.key}}`)).toBeLessThanOrEqual(1000);
    expect(await backend.extend(items)).toEqual([true, true, true]);
    for (const it of items) expect(await admin.pttl(`${kp}{${it.key}}`)).toBeGreaterThan(10_000);
    // a wrong token is still refused
    expect(await backend.extend([{ ...items[0]!, token: 'nope' }])).toEqual([false]);
    for (const it of items) expect(await backend.release(it.key, it.token)).toBe(true);
    await backend.close();
  });
});

describe('Redis Cluster slots and round trips', () => {
  test('slotOf agrees with CLUSTER KEYSLOT', async () => {
    const admin = await clients.make('ioredis');
    const keys = ['a', '{leasehold:x}', '{leasehold:x}:v', 'foo{}bar', '{}x', 'é漢字', '{a}}b', 'x{y}z{w}', '{'];
    for (let i = 0; i < 200; i++) keys.push(`{lh:${randomUUID()}}`);
    for (const k of keys) expect([k, slotOf(k)]).toEqual([k, Number(await admin.cluster('KEYSLOT', k))]);
  });

  test('ioredis: renewing 300 leases is one round trip per master', async () => {
    const prefix = `lh-rt-${randomUUID().slice(0, 8)}`;
    const client = await clients.make('ioredis');
    const backend = redis(client);
    const items = [];
    for (let i = 0; i < 300; i++) {
      const token = randomUUID();
      expect(await backend.acquire(`${prefix}:${i}`, { token, ttlMs: 10_000 })).not.toBeNull();
      items.push({ key: `${prefix}:${i}`, token, ttlMs: 10_000 });
    }
    // a round trip is a pipeline or a script sent alone, on a master's connection or the cluster's
    const trips = new Map<string, number>();
    const restore: (() => void)[] = [];
    const count = (who: any, name: string) => {
      for (const m of ['pipeline', 'evalsha', 'eval']) {
        const orig = who[m];
        who[m] = (...a: unknown[]) => (trips.set(name, (trips.get(name) ?? 0) + 1), orig.apply(who, a));
        restore.push(() => (who[m] = orig));
      }
    };
    const masters = client.nodes('master') as any[];
    for (const n of masters) count(n, `${n.options.host}:${n.options.port}`);
    count(client, 'cluster');
    try {
      expect(await backend.extend(items)).toEqual(items.map(() => true));
      expect(trips.get('cluster')).toBeUndefined();
      expect([...trips.values()]).toEqual([1, 1, 1]);
      // a lease that is not ours any more is reported as such, the others are renewed
      expect(await backend.extend([items[0]!, { ...items[1]!, token: 'not-the-token' }])).toEqual([true, false]);
    } finally {
      for (const r of restore) r();
      for (const it of items) await backend.release(it.key, it.token);
      await backend.close();
    }
  });
});

/**
 * Redis 6 has no `#!lua flags=allow-cross-slot-keys`: it answers EVALSHA of the per-node script
 * with NOSCRIPT and its EVAL with a compile error. The server here is 7.0, so that refusal is
 * played on the master connections for that one script only; everything else (slot table,
 * EXTEND_MANY per slot, the pipelines, the leases) is the real cluster.
 */
function actLikeRedis6(client: any): { trips: Map<string, number>; restore(): void } {
  const trips = new Map<string, number>();
  const undo: (() => void)[] = [];
  const wrap = (who: any, name: string, m: string, refuse?: (a: unknown[]) => Error | null) => {
    const orig = who[m];
    who[m] = (...a: unknown[]) => {
      trips.set(name, (trips.get(name) ?? 0) + 1);
      const no = refuse?.(a);
      return no ? Promise.reject(no) : orig.apply(who, a);
    };
    undo.push(() => (who[m] = orig));
  };
  for (const n of client.nodes('master') as any[]) {
    const name = `${n.options.host}:${n.options.port}`;
    wrap(n, name, 'evalsha', (a) => (a[0] === EXTEND_NODE.sha ? new Error('NOSCRIPT No matching script.') : null));
    wrap(n, name, 'eval', (a) =>
      a[0] === EXTEND_NODE.source
        ? new Error("ERR Error compiling script (new function): user_script:1: unexpected symbol near '#'")
        : null,
    );
    wrap(n, name, 'pipeline'); // the per-node script for more than one chunk (not reached with 300 leases)
  }
  for (const m of ['pipeline', 'evalsha', 'eval']) wrap(client, 'cluster', m);
  return { trips, restore: () => undo.forEach((f) => f()) };
}

describe('Redis Cluster renewal without the cross-slot script (Redis 6)', () => {
  test('ioredis: 300 leases renew with one EXTEND_MANY pipeline per master', async () => {
    const prefix = `lh-r6-${randomUUID().slice(0, 8)}`;
    const client = await clients.make('ioredis');
    const backend = redis(client);
    const items = [];
    for (let i = 0; i < 300; i++) {
      const token = randomUUID();
      expect(await backend.acquire(`${prefix}:${i}`, { token, ttlMs: 10_000 })).not.toBeNull();
      items.push({ key: `${prefix}:${i}`, token, ttlMs: 10_000 });
    }
    const slots = new Set(items.map((it) => slotOf(`{${it.key}}`)));
    const r6 = actLikeRedis6(client);
    try {
      // first renewal: each master refuses the per-node script (NOSCRIPT, then the compile error),
      // the chunks take the per-slot path, and the adapter remembers that this server cannot
      expect(await backend.extend(items)).toEqual(items.map(() => true));
      const first = Object.fromEntries(r6.trips);
      for (const [who, n] of r6.trips) if (who !== 'cluster') expect([who, n]).toEqual([who, 2]);
      // 3 pipelines, and again with EVAL on a master that has not cached EXTEND_MANY yet (NOSCRIPT)
      expect(first.cluster, JSON.stringify(first)).toBeGreaterThanOrEqual(3);
      expect(first.cluster, JSON.stringify(first)).toBeLessThanOrEqual(6);
      expect(Object.keys(first)).toHaveLength(4); // the cluster and its 3 masters
      r6.trips.clear();
      // from then on: one pipeline of EXTEND_MANY (one call per slot) per master, nothing else
      expect(await backend.extend(items)).toEqual(items.map(() => true));
      expect(Object.fromEntries(r6.trips)).toEqual({ cluster: 3 });
      expect(slots.size).toBeGreaterThan(200); // many slots, still 3 round trips
      for (const it of items.slice(0, 10)) expect(Number(await client.pttl(`{${it.key}}`))).toBeGreaterThan(9000);
      expect(await backend.extend([items[0]!, { ...items[1]!, token: 'not-the-token' }])).toEqual([true, false]);
    } finally {
      r6.restore();
      for (const it of items) await backend.release(it.key, it.token);
      await backend.close();
    }
  });

  test('ioredis: 300 leases held past 3 TTLs of 2s through the fallback: none lost', { timeout: 40_000 }, async () => {
    const prefix = `lh-r6h-${randomUUID().slice(0, 8)}`;
    const client = await clients.make('ioredis');
    const r6 = actLikeRedis6(client);
    const locks = createLocks(redis(client), { prefix, ttl: '2s' });
    try {
      const leases: Lease[] = [];
      for (let i = 0; i < 300; i++) leases.push(await locks.acquire(`k${i}`));
      const lost: string[] = [];
      for (const l of leases) l.signal.addEventListener('abort', () => lost.push(l.key));
      // holding is the point of the test: 3 TTLs (renewals every ttl/3)
      await new Promise((r) => setTimeout(r, 6500));
      expect(lost).toEqual([]);
      expect(leases.every((l) => l.held)).toBe(true);
      // each master was asked for the per-node script once (EVALSHA, then EVAL), at the first renewal;
      // every renewal after it went through the cluster's per-master pipelines
      for (const [who, n] of r6.trips) if (who !== 'cluster') expect([who, n]).toEqual([who, 2]);
      for (const l of leases.slice(0, 10)) expect((await locks.inspect(l.key))?.fence).toBe(l.fence);
      for (const l of leases) expect(await l.release()).toBe(true);
    } finally {
      r6.restore();
      await locks.close();
    }
  });
});

describe.each(['ioredis', 'node-redis'] as ClientKind[])('Redis Cluster resharding on %s', (kind) => {
  test('renewal follows a slot that moved to another master (MOVED, ASK)', { timeout: 40_000 }, async () => {
    const prefix = `lh-mv-${randomUUID().slice(0, 8)}`;
    const admin = await clients.make('ioredis');
    const backend = redis(await clients.make(kind));
    const token = randomUUID();
    const key = `${prefix}:moving`;
    const slot = slotOf(`{${key}}`);
    expect(await backend.acquire(key, { token, ttlMs: 20_000 })).not.toBeNull();
    const others = [];
    for (let i = 0; i < 20; i++) {
      const t = randomUUID();
      expect(await backend.acquire(`${prefix}:${i}`, { token: t, ttlMs: 20_000 })).not.toBeNull();
      others.push({ key: `${prefix}:${i}`, token: t, ttlMs: 20_000 });
    }
    const move = await slotMover(admin, slot);
    try {
      // mid-migration: the keys already sit on the target, the source answers ASK and the target
      // TRYAGAIN for a script whose keys are not all there yet: the renewal may fail for now (the
      // engine retries it soon), but it never reports a held lease as lost
      await move.start();
      // (only the moving slot's leases: the others' slots answer)
      const mid = await backend.extend([{ key, token, ttlMs: 20_000 }, ...others]).catch((e: Error) => e);
      if (mid instanceof Error) expect(mid.message).toMatch(/TRYAGAIN|redirections/);
      else
        for (const [i, r] of mid.entries()) {
          if (r instanceof Error) expect(r.message).toMatch(/TRYAGAIN|redirections/);
          else expect([i, r]).toEqual([i, true]);
        }
      // done: the source answers MOVED
      await move.finish();
      expect(await backend.extend([{ key, token, ttlMs: 20_000 }, ...others])).toEqual(
        others.map(() => true).concat(true),
      );
      expect(await backend.extend([{ key, token: 'nope', ttlMs: 20_000 }])).toEqual([false]);
      expect(await backend.release(key, token)).toBe(true);
      for (const o of others) await backend.release(o.key, o.token);
    } finally {
      await move.back();
      await backend.close();
    }
  });
});

describe.each(['ioredis', 'node-redis'] as ClientKind[])('Redis Cluster, a stuck slot, on %s', (kind) => {
  test('a slot stuck mid-migration fails the renewal of its own leases only', { timeout: 40_000 }, async () => {
    const prefix = `lh-stuck-${randomUUID().slice(0, 8)}`;
    const admin = await clients.make('ioredis');
    const [ka, kb] = (await spreadKeys(admin, prefix, 2)).map((k) => `${prefix}:${k}`);
    const backend = redis(await clients.make(kind));
    const a = { key: ka!, token: randomUUID(), ttlMs: 20_000 };
    const b = { key: kb!, token: randomUUID(), ttlMs: 20_000 };
    expect(await backend.acquire(a.key, { token: a.token, ttlMs: 20_000 })).not.toBeNull();
    expect(await backend.acquire(b.key, { token: b.token, ttlMs: 20_000 })).not.toBeNull();
    // a's slot MIGRATING / IMPORTING, no key moved, and left so (TRYAGAIN for as long as it lasts)
    const move = await slotMover(admin, slotOf(`{${a.key}}`));
    try {
      await move.half();
      const t0 = Date.now();
      const r = await backend.extend([a, b]);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(TRYAGAIN_MS - 50); // a was sent again meanwhile
      expect(r[0]).toBeInstanceOf(Error);
      expect((r[0] as Error).message).toMatch(/TRYAGAIN|redirections/);
      expect(r[1]).toBe(true); // b's master is untouched: b was renewed
      // a lease alone (nothing went through) still rejects
      await expect(backend.extend([a])).rejects.toThrow(/TRYAGAIN|redirections/);
    } finally {
      for (const n of [move.source, move.target]) await n.cluster('SETSLOT', slotOf(`{${a.key}}`), 'STABLE');
    }
    expect(await backend.extend([a, b])).toEqual([true, true]);
    for (const x of [a, b]) expect(await backend.release(x.key, x.token)).toBe(true);
    await backend.close();
  });

  test(
    'the keeper retries only the stuck lease; the others of its tick stay renewed',
    { timeout: 40_000 },
    async () => {
      const prefix = `lh-stuckk-${randomUUID().slice(0, 8)}`;
      const admin = await clients.make('ioredis');
      const keys = await spreadKeys(admin, prefix, 2);
      const locks = createLocks(redis(await clients.make(kind)), { prefix, ttl: '6s' });
      const slot = slotOf(`{${prefix}:${keys[0]}}`);
      const move = await slotMover(admin, slot);
      const events: { key: string; ok: boolean; error?: unknown }[] = [];
      let unstuck: Promise<void> | null = null;
      const stable = async () => {
        for (const n of [move.source, move.target]) await n.cluster('SETSLOT', slot, 'STABLE');
      };
      const onExtend = (m: unknown) => {
        const e = m as { key: string; ok: boolean; error?: unknown };
        if (!keys.includes(e.key)) return;
        events.push(e);
        // the first failed renewal of the stuck lease: its slot recovers before the retry (~1.5 s later)
        if (!e.ok && e.error && !unstuck) unstuck = stable();
      };
      diagnostics.subscribe('leasehold:extend', onExtend);
      try {
        const [A, B] = [await locks.acquire(keys[0]!), await locks.acquire(keys[1]!)];
        await move.half();
        // the first renewal (a third of the TTL, then TRYAGAIN_MS of retries) and A's retry after it
        const deadline = Date.now() + 15_000;
        while (!events.some((e) => e.key === keys[0] && e.ok) && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 50));
        await unstuck;
        // one tick renewed B and failed A (not refused: A was not lost); A's retry renewed it
        expect(events.slice(0, 2).map((e) => [e.key, e.ok, e.error instanceof Error])).toEqual(
          expect.arrayContaining([
            [keys[0], false, true],
            [keys[1], true, false],
          ]),
        );
        expect(events.find((e) => e.key === keys[0] && e.ok)).toBeDefined();
        expect([A!.held, B!.held]).toEqual([true, true]);
        for (const l of [A!, B!]) expect(await l.release()).toBe(true);
      } finally {
        diagnostics.unsubscribe('leasehold:extend', onExtend);
        await (unstuck ?? stable());
        await locks.close();
      }
    },
  );
});

describe.each(['ioredis', 'node-redis'] as ClientKind[])('Redis Cluster, a half-migrated slot, on %s', (kind) => {
  test('no fence is minted on a node the fence counter has not reached yet', { timeout: 40_000 }, async () => {
    const prefix = `lh-half-${randomUUID().slice(0, 8)}`;
    const admin = await clients.make('ioredis');
    const backend = redis(await clients.make(kind));
    const key = `${prefix}:k`;
    const fence = `{${key}}:fence`;
    const first = randomUUID();
    const g = await backend.acquire(key, { token: first, ttlMs: 20_000 });
    expect(g).not.toBeNull();
    expect(await backend.release(key, first)).toBe(true);
    // the slot is MIGRATING to another master, which is IMPORTING it, and no key has moved: the
    // lock key is on neither node, the fence counter only on the source
    const move = await slotMover(admin, slotOf(`{${key}}`));
    try {
      await move.half();
      // the source sends the script on (ASK: its lock key is not there); the target must not
      // grant on a counter it does not have — its clock may be behind the source's, and a fence
      // from it could be lower than the last one the source issued — so it is refused for now
      // (TRYAGAIN) until the counter has moved
      const r = await backend.acquire(key, { token: randomUUID(), ttlMs: 20_000 }).catch((e: Error) => e);
      expect(r).toBeInstanceOf(Error);
      expect((r as Error).message).toMatch(/TRYAGAIN|redirections/);
      // the target answers for the slot only after ASKING (it does not own it yet)
      const onTarget = async (k: string) => (await move.target.pipeline().asking().exists(k).exec())[1][1];
      expect(await onTarget(fence)).toBe(0);
      expect(await onTarget(`{${key}}`)).toBe(0);
      expect(await move.source.exists(fence)).toBe(1);
    } finally {
      await move.back();
      await backend.close();
    }
    // with the slot settled again, the next grant's fence is above the first one's
    const again = randomUUID();
    const g2 = await backend2(kind, key, again);
    expect(g2.fence > g!.fence).toBe(true);
  });
});

describe.each(['ioredis', 'node-redis'] as ClientKind[])(
  'Redis Cluster, a held lock while its slot migrates, on %s',
  (kind) => {
    test(
      'a contender, the renewal, a queued waiter and the release wait out the migration (TRYAGAIN, sent again): none fails, the waiter gets the lock',
      { timeout: 40_000 },
      async () => {
        const prefix = `lh-mig-${randomUUID().slice(0, 8)}`;
        const admin = await clients.make('ioredis');
        const holder = redis(await clients.make(kind));
        const other = redis(await clients.make(kind));
        const key = `${prefix}:k`;
        const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
        const g = await holder.acquire(key, { token: a, ttlMs: 20_000, renew: true });
        expect(g).not.toBeNull();
        // a waiter in the queue: the lock's queue keys exist too
        expect(await other.acquire(key, { token: c, ttlMs: 20_000, queue: true, renew: true })).toBeNull();
        const move = await slotMover(admin, slotOf(`{${key}}`));
        try {
          // MIGRATING / IMPORTING, no key moved yet: before, the source ran each script and stopped
          // it at the first key it lacked ("non local key"): every call below failed at once
          await move.half();
          const t0 = Date.now();
          const contender = other.acquire(key, { token: b, ttlMs: 20_000 });
          const renewal = holder.extend([{ key, token: a, ttlMs: 20_000 }]);
          // the migration completes 300 ms later (keys moved, then the slot assigned)
          await new Promise((r) => setTimeout(r, 300));
          await move.start();
          await move.finish();
          expect(await contender).toBeNull();
          expect(await renewal).toEqual([true]);
          expect(Date.now() - t0).toBeGreaterThanOrEqual(300); // they waited: nothing ran on a half view
          // the release hands the lock to the queued waiter, on the new owner
          expect(await holder.release(key, a)).toBe(true);
          const info = await other.inspect(key);
          expect(info?.fence).toBeGreaterThan(g!.fence);
          const took = await other.acquire(key, { token: c, ttlMs: 20_000, queue: true, renew: true });
          expect(took?.fence).toBe(info!.fence);
          expect(await other.release(key, c)).toBe(true);
        } finally {
          await move.back();
          await holder.close();
          await other.close();
        }
      },
    );

    test(
      'a migration that stalls past the retries: the release fails with TRYAGAIN and writes nothing',
      { timeout: 40_000 },
      async () => {
        const prefix = `lh-stall-${randomUUID().slice(0, 8)}`;
        const admin = await clients.make('ioredis');
        const backend = redis(await clients.make(kind));
        const key = `${prefix}:k`;
        const a = randomUUID();
        const g = await backend.acquire(key, { token: a, ttlMs: 20_000, value: 'v1' });
        expect(g).not.toBeNull();
        const move = await slotMover(admin, slotOf(`{${key}}`));
        try {
          await move.half();
          const t0 = Date.now();
          const r = await backend.release(key, a).catch((e: Error) => e);
          expect(r).toBeInstanceOf(Error);
          expect((r as Error).message).toMatch(/TRYAGAIN|redirections/);
          expect(Date.now() - t0).toBeGreaterThanOrEqual(TRYAGAIN_MS - 50);
          await move.start();
          await move.finish();
          // still held by its holder, as it was: the refused script never ran
          const info = await backend.inspect(key);
          expect(info).toMatchObject({ fence: g!.fence, value: 'v1' });
          expect(info!.remainingMs).toBeGreaterThan(10_000);
          expect(await backend.release(key, a)).toBe(true);
          expect(await backend.inspect(key)).toBeNull();
        } finally {
          await move.back();
          await backend.close();
        }
      },
    );
  },
);

/** A fresh backend's grant on `key` (the test's backend is closed by then). */
async function backend2(kind: ClientKind, key: string, token: string) {
  const b = redis(await clients.make(kind));
  try {
    const g = await b.acquire(key, { token, ttlMs: 5_000 });
    expect(g).not.toBeNull();
    expect(await b.release(key, token)).toBe(true);
    return g!;
  } finally {
    await b.close();
  }
}

test('ioredis Cluster: 30 acquires at once, on keys of 3 masters, are one write per master', async () => {
  const prefix = `lh-cl-${randomUUID().slice(0, 8)}`;
  const admin = await clients.make('ioredis');
  const keys = await spreadKeys(admin, prefix, 30);
  const client: any = await clients.make('ioredis');
  const locks = createLocks(redis(client), { prefix });
  try {
    // every master's connection up and the scripts loaded there
    await Promise.all(keys.map(async (k) => (await locks.acquire(k)).release()));
    const masters: any[] = client.nodes('master');
    expect(masters).toHaveLength(3);
    const writes = masters.map(() => 0);
    const restore = masters.map((m, i) => {
      const stream = m.stream;
      const [write, writev] = [stream._write, stream._writev];
      stream._write = function (...a: unknown[]) {
        writes[i] = (writes[i] ?? 0) + 1;
        return write.apply(this, a);
      };
      stream._writev = function (...a: unknown[]) {
        writes[i] = (writes[i] ?? 0) + 1;
        return writev.apply(this, a);
      };
      return () => Object.assign(stream, { _write: write, _writev: writev });
    });
    try {
      const leases = await Promise.all(keys.map((k) => locks.acquire(k)));
      expect(writes).toEqual([1, 1, 1]);
      expect(await Promise.all(leases.map((l) => l.release()))).toEqual(leases.map(() => true));
    } finally {
      for (const r of restore) r();
    }
  } finally {
    await locks.close();
  }
});
