/**
 * Arrival-order fairness on Redlock (issue #16, point 4), on the shared nodes 7001..7005. While
 * waiters are queued, a node grants its free lock only to the live head of its waiter queue:
 *   - a caller that does not wait (tryAcquire) cannot barge past a head that has its turn, and a
 *     head that does not come (SIGSTOPped) holds the queue up only for its turn, not its place;
 *   - nodes that disagree on the head (a place missing on a minority) still serve the earlier
 *     waiter first, and the later one right after.
 * The conformance suite checks the plain case: five processes' waiters served in arrival order.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { RedisAdapter } from '../../src/backends/redis/client.js';
import { redlock } from '../../src/backends/redlock/index.js';
import { ACQUIRE } from '../../src/backends/redlock/scripts.js';
import { PLACE_MS, REFRESH_MS, TURN_MS } from '../../src/backends/redlock/wakeups.js';
import { createLocks, type Locks } from '../../src/index.js';
import { type AnyClient, clients, closeClients, eventually, raw, requireShared, SHARED_PORTS } from './nodes.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));
const prefix = `lh-rlfair-${randomUUID().slice(0, 8)}`;
const open: Locks[] = [];
const kids: ChildProcess[] = [];
const conns: AnyClient[][] = [];
let admin: AnyClient[];

beforeAll(async () => {
  await requireShared();
  admin = await clients('ioredis', SHARED_PORTS);
});
afterEach(async () => {
  for (const k of kids.splice(0)) {
    if (k.exitCode !== null) continue;
    k.kill('SIGCONT');
    k.kill('SIGKILL');
  }
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await Promise.allSettled(conns.splice(0).map((c) => closeClients(c)));
});
afterAll(() => closeClients(admin));

/**
 * A Locks on its own clients and backend (its own wake channel: a waiter of its own). While
 * `deaf.on`, the wake-ups on its channel are dropped at the client (lost on the way).
 */
async function instance() {
  const cs = await clients('ioredis', SHARED_PORTS);
  conns.push(cs);
  const backend = redlock(cs);
  const internals = backend as unknown as {
    nodes: { adapter: RedisAdapter }[];
    wakeups: {
      channel: string;
      skewMs: number;
      waits: { waiters: Map<string, Set<unknown>> };
      subscribe(): Promise<boolean>;
    };
  };
  const deaf = { on: false, dropped: 0 };
  for (const { adapter } of internals.nodes) {
    const subscribe = adapter.subscribe.bind(adapter);
    adapter.subscribe = (channel, listener) =>
      subscribe(channel, (ch, message) => {
        if (deaf.on && ch === internals.wakeups.channel) {
          deaf.dropped++;
          return;
        }
        listener(ch, message);
      });
  }
  // while `gate.until` is set, this backend's ACQUIRE calls wait for it before they are sent (a
  // slow network, or a process descheduled between stamping its arrival and sending the attempt)
  const gate = { until: null as Promise<void> | null, held: 0 };
  for (const { adapter } of internals.nodes) {
    const run = adapter.run.bind(adapter);
    adapter.run = async (calls) => {
      if (gate.until && calls.some((c) => c.script === ACQUIRE)) {
        gate.held++;
        await gate.until;
      }
      return run(calls);
    };
  }
  const locks = createLocks(backend, { prefix, ttl: '30s' });
  open.push(locks);
  /** Calls of this backend now asleep in a wait (subscribed: only a wake-up or the refresh ends it). */
  const sleeping = () => internals.wakeups.waits.waiters.size;
  /** Puts this host's wall clock `ms` off, as on a host without NTP. */
  const skew = (ms: number) => void (internals.wakeups.skewMs = ms);
  /** Subscribes the wake channel now (else a first wait subscribes, then attempts again at once). */
  const listen = async () => expect(await internals.wakeups.subscribe()).toBe(true);
  return { locks, channel: internals.wakeups.channel, deaf, sleeping, skew, gate, listen };
}

/** Waiters registered for the key, in queue order, on every node. */
const queues = (key: string): Promise<string[][]> =>
  Promise.all(admin.map((c) => raw(c, 'ZRANGE', `{${prefix}:${key}}:q`, '0', '-1') as Promise<string[]>));
const queuedEverywhere = async (key: string, n: number) => (await queues(key)).every((q) => q.length === n);

describe('redlock arrival-order fairness (5 nodes, ioredis)', () => {
  test('nobody barges past a head that has its turn; a head that does not come holds the queue up for its turn only', async () => {
    const key = 'turn';
    const { locks: a } = await instance();
    const { locks: b } = await instance();
    const held = await a.acquire(key);
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', CHILD, 'queue', SHARED_PORTS.join(','), prefix, key, '30000'],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    kids.push(child);
    await eventually(() => queuedEverywhere(key, 1), 20_000, 'one waiter queued on every node');
    child.kill('SIGSTOP'); // alive and queued, but it will not come for the lock
    const releasedAt = performance.now();
    await held.release(); // the lock is free on every node; the head's turn begins
    const barging = await b.tryAcquire(key);
    const tried = performance.now() - releasedAt;
    expect(tried).toBeLessThan(TURN_MS); // still the head's turn when it was refused
    expect(barging).toBeNull();
    // a waiting caller gets it once the head's turn has lapsed, at its next attempt: long before
    // the head's place would have lapsed by itself (PLACE_MS after its last attempt)
    const lease = await b.acquire(key, { wait: '20s' });
    const delay = performance.now() - releasedAt;
    console.log(
      `[rl-fair] stopped head: refused a barging tryAcquire after ${Math.round(tried)} ms, next grant ${Math.round(delay)} ms after the release`,
    );
    expect(delay).toBeGreaterThanOrEqual(TURN_MS - 50);
    expect(delay).toBeLessThan(PLACE_MS - REFRESH_MS);
    await lease.release();
  }, 60_000);

  test('nodes that disagree on the head still serve the earlier waiter first, the later one next', async () => {
    const key = 'disagree';
    const { locks: holder } = await instance();
    const first = await instance();
    const second = await instance();
    const held = await holder.acquire(key);
    const order: string[] = [];
    const w1 = first.locks.withLock(key, () => void order.push('first'), { wait: '20s' });
    w1.catch(() => {}); // may reject before it is awaited below
    await eventually(() => queuedEverywhere(key, 1), 5000, 'one waiter queued on every node');
    const w2 = second.locks.withLock(key, () => void order.push('second'), { wait: '20s' });
    w2.catch(() => {});
    await eventually(() => queuedEverywhere(key, 2), 5000, 'two waiters queued on every node');
    expect((await queues(key)).every((q) => q[0] === first.channel)).toBe(true);
    // two of the five nodes lose the first waiter's place (as after a restart without persistence):
    // there the second waiter is the head, and those nodes wake it
    for (const c of admin.slice(0, 2)) {
      await raw(c, 'ZREM', `{${prefix}:${key}}:q`, first.channel);
      await raw(c, 'ZREM', `{${prefix}:${key}}:qx`, first.channel);
    }
    const releasedAt = performance.now();
    await held.release();
    await Promise.all([w1, w2]);
    const took = performance.now() - releasedAt;
    console.log(`[rl-fair] disagreeing heads: ${order.join(', ')} served within ${Math.round(took)} ms of the release`);
    expect(order).toEqual(['first', 'second']);
    expect(took).toBeLessThan(2 * REFRESH_MS + 1000);
    await eventually(
      async () => (await queues(key)).every((q) => q.length === 0),
      2000,
      'an empty queue on every node',
    );
  }, 60_000);

  test('a waiter that arrived first but reaches the nodes after the release was sent to a later head is served at once, not at its refresh', async () => {
    const key = 'late-early';
    const { locks: holder } = await instance();
    const early = await instance();
    const later = await instance();
    await early.listen();
    await later.listen();
    const held = await holder.acquire(key);
    // the early waiter stamps its arrival, then its attempt is held back before it is sent
    let open = () => {};
    early.gate.until = new Promise<void>((r) => (open = r));
    const w1 = early.locks.acquire(key, { wait: '20s' });
    w1.catch(() => {});
    await eventually(async () => early.gate.held > 0, 5000, 'the early attempt held back');
    // the later waiter arrives after it and is queued on every node: the only place there
    const w2 = later.locks.acquire(key, { wait: '20s' });
    w2.catch(() => {});
    await eventually(
      async () => (await queuedEverywhere(key, 1)) && later.sleeping() === 1,
      5000,
      'the later waiter queued and asleep',
    );
    expect((await queues(key)).every((q) => q[0] === later.channel)).toBe(true);
    // the release wakes the head it sees, the later waiter; that one does not hear it (its
    // messages lost), so only the early waiter can take the free lock before a refresh
    later.deaf.on = true;
    await held.release();
    const sentAt = performance.now();
    early.gate.until = null;
    open();
    const lease = await w1;
    const delay = performance.now() - sentAt;
    console.log(
      `[rl-fair] an earlier arrival that reached the nodes late: granted ${Math.round(delay)} ms after it was sent`,
    );
    // refused there as 'not the head' while it was the earliest waiter, it would sleep REFRESH_MS
    expect(delay).toBeLessThan(REFRESH_MS / 2);
    later.deaf.on = false;
    await lease.release();
    await (await w2).release();
  }, 60_000);

  test('under contention every handoff is woken: no waiter sits out a refresh while the lock changes hands', async () => {
    const key = 'contended';
    const n = 6;
    const per = 40;
    const ready: Promise<void>[] = [];
    const runs = Array.from({ length: n }, () => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', CHILD, 'contend', SHARED_PORTS.join(','), prefix, key, '5000', String(per)],
        { stdio: ['pipe', 'pipe', 'inherit'] },
      );
      kids.push(child);
      child.stdin!.on('error', () => {}); // a contender that died: its exit says why
      let out = '';
      let isReady = () => {};
      ready.push(new Promise<void>((resolve) => (isReady = resolve)));
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('"ready"')) isReady();
      });
      return new Promise<number[]>((resolve, reject) => {
        child.once('exit', (code) => {
          isReady(); // a contender that died unready fails below, with its output
          const line = out.split('\n').find((l) => l.includes('"waits"'));
          if (code !== 0 || !line) reject(new Error(`contender exited ${code}: ${out.slice(-500)}`));
          else resolve((JSON.parse(line) as { waits: number[] }).waits);
        });
      });
    });
    for (const r of runs) r.catch(() => {}); // awaited below; may reject while we wait for the others
    // every contender connected and subscribed: the measured waits are handoffs, not first contact
    await Promise.all(ready);
    for (const k of kids) k.stdin!.write('go\n');
    const waits = (await Promise.all(runs)).flat().sort((a, b) => a - b);
    const max = waits[waits.length - 1]!;
    console.log(
      `[rl-fair] contended, ${n} processes: ${waits.length} grants, wait p50 ${waits[waits.length >> 1]!.toFixed(1)} ms, ` +
        `p99 ${waits[Math.floor(waits.length * 0.99)]!.toFixed(1)} ms, max ${max.toFixed(1)} ms`,
    );
    expect(waits.length).toBe(n * per);
    // a waiter that found the lock still changing hands and was not woken again sat out REFRESH_MS
    expect(max).toBeLessThan(REFRESH_MS * 0.8);
  }, 120_000);

  test('a host whose clock is a minute behind does not jump the queue: arrivals follow the nodes’ clock', async () => {
    const key = 'skew';
    const { locks: holder } = await instance();
    const slow = await instance();
    const other = await instance();
    slow.skew(-60_000);
    const held = await holder.acquire(key);
    // one queued refusal tells the slow host how far the nodes' clock is from its own
    const learn = new AbortController();
    const first = slow.locks.acquire(key, { wait: '20s', signal: learn.signal });
    first.catch(() => {}); // rejects with the abort below
    await eventually(() => queuedEverywhere(key, 1), 5000, 'one waiter queued on every node');
    learn.abort(new Error('learnt'));
    await expect(first).rejects.toThrow('learnt');
    await eventually(() => queuedEverywhere(key, 0), 5000, 'an empty queue on every node');
    // now the other host arrives first, the slow one second
    const order: string[] = [];
    const w1 = other.locks.withLock(key, () => void order.push('other'), { wait: '20s' });
    w1.catch(() => {});
    await eventually(() => queuedEverywhere(key, 1), 5000, 'one waiter queued on every node');
    const w2 = slow.locks.withLock(key, () => void order.push('slow'), { wait: '20s' });
    w2.catch(() => {});
    await eventually(() => queuedEverywhere(key, 2), 5000, 'two waiters queued on every node');
    expect((await queues(key)).every((q) => q[0] === other.channel)).toBe(true);
    await held.release();
    await Promise.all([w1, w2]);
    expect(order).toEqual(['other', 'slow']);
  }, 60_000);

  test('a woken head that gives up before it comes wakes the next waiter at once, not at its refresh', async () => {
    const key = 'leave';
    const { locks: holder } = await instance();
    const first = await instance();
    const second = await instance();
    const held = await holder.acquire(key);
    const giveUp = new AbortController();
    const w1 = first.locks.acquire(key, { wait: '20s', signal: giveUp.signal });
    w1.catch(() => {}); // rejects with the abort below
    await eventually(() => queuedEverywhere(key, 1), 5000, 'one waiter queued on every node');
    const w2 = second.locks.acquire(key, { wait: '20s' });
    w2.catch(() => {});
    const asleep = async () => (await queuedEverywhere(key, 2)) && first.sleeping() === 1 && second.sleeping() === 1;
    await eventually(asleep, 5000, 'both waiters queued and asleep');
    // the second waiter just attempted: left alone, it attempts again only ~REFRESH_MS from now
    first.deaf.on = true; // the head never hears its wake-up
    await held.release();
    const gaveUpAt = performance.now();
    giveUp.abort(new Error('gave up'));
    await expect(w1).rejects.toThrow('gave up');
    const lease = await w2;
    const delay = performance.now() - gaveUpAt;
    console.log(`[rl-fair] head gave up after its wake-up: next waiter granted ${Math.round(delay)} ms later`);
    // it was woken (the release's messages may be read after the second waiter's grant), and did not come
    await eventually(async () => first.deaf.dropped > 0, 2000, 'the head to be woken (its messages dropped)');
    expect(delay).toBeLessThan(REFRESH_MS / 2);
    await lease.release();
  }, 60_000);
});

test('200 waiters whose places lapsed (their process died) do not keep a free lock from tryAcquire', async () => {
  const key = 'dead-200';
  const q = `{${prefix}:${key}}:q`;
  const qx = `{${prefix}:${key}}:qx`;
  // what a killed process's waiters leave on every node: their arrivals, and places that lapsed
  const lapsed = String(Date.now() - 60_000);
  for (const c of admin) {
    const [arrivals, places]: [string[], string[]] = [[], []];
    for (let i = 0; i < 200; i++) {
      arrivals.push(String(i + 1), `dead-${i}`);
      places.push(lapsed, `dead-${i}`);
    }
    await raw(c, 'ZADD', q, ...arrivals);
    await raw(c, 'ZADD', qx, ...places);
    await raw(c, 'PEXPIRE', q, '60000');
    await raw(c, 'PEXPIRE', qx, '60000');
  }
  const { locks } = await instance();
  const lease = await locks.tryAcquire(key);
  expect(lease).not.toBeNull();
  for (const c of admin) expect(await raw(c, 'ZCARD', q)).toBe(0);
  expect(await lease!.release()).toBe(true);
}, 30_000);
