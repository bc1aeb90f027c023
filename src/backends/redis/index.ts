/**
 * Single-node Redis backend for ioredis and node-redis. Acquire: one script (SET NX PX + INCR of
 * the fence; a fair arrival queue once anyone waits). Release: one script (compare-and-delete,
 * then PUBLISH to wake the queue's head only). Extend: one script per chunk of leases, all
 * chunks pipelined in one round trip. Waiters subscribe to the key's channel on one shared
 * subscriber connection and re-check (bounded by the holder's TTL) if a message is missed.
 */
import type { AcquireRequest, Backend, ExtendItem, Grant, LockInfo, ResultStore } from '../../backend.js';
import { checkOptions } from '../../validate.js';
import { adapt, type RedisAdapter } from './client.js';
import { ACQUIRE, EXTEND, EXTEND_MANY, GET_RESULT, INSPECT, LEAVE, PUT_RESULT, RELEASE } from './scripts.js';
import { digestOf, Wakeups } from './wakeups.js';

export { fencedSet, fenceKeyOf } from './fenced.js';
export { adapt, script, type RedisAdapter, type Script, type ScriptCall } from './client.js';

export interface RedisOptions {
  /** How long a key's subscription lingers after its last waiter left (default 2000ms). */
  lingerMs?: number;
}

/** The Redis keys of one lock. */
export function redisKeys(key: string) {
  const k = `{${key}}`;
  return {
    lock: k,
    fence: `${k}:fence`,
    q: `${k}:q`,
    qx: `${k}:qx`,
    value: `${k}:v`,
    result: `${k}:result`,
    channel: `${k}:released`,
  };
}

/** Leases per EXTEND_MANY call (all calls of a tick are pipelined together). */
const CHUNK = 256;

export function redis(client: unknown, options?: RedisOptions): RedisBackend {
  const o = checkOptions<RedisOptions>(options, ['lingerMs'], 'redis');
  return new RedisBackend(adapt(client, 'redis(client)'), o.lingerMs ?? 2000, client);
}

export class RedisBackend implements Backend {
  readonly name = 'redis';
  readonly capabilities = { push: true, fair: true, value: true, results: true, session: false } as const;
  readonly results: ResultStore = {
    get: async (lockKey) => {
      const [r] = await this.adapter.run([{ script: GET_RESULT, keys: [redisKeys(lockKey).result], args: [] }]);
      if (r instanceof Error) throw r;
      return r === null || r === undefined || r === false ? null : String(r);
    },
    put: async (lockKey, token, value, ttlMs) => {
      const k = redisKeys(lockKey);
      const [r] = await this.adapter.run([
        { script: PUT_RESULT, keys: [k.lock, k.result], args: [token, value, ttlMs] },
      ]);
      if (r instanceof Error) throw r;
      return Number(r) === 1;
    },
  };
  private readonly wakeups: Wakeups;
  private readonly cluster: boolean;
  private closed = false;

  constructor(
    readonly adapter: RedisAdapter,
    lingerMs: number,
    client?: unknown,
  ) {
    this.wakeups = new Wakeups(adapter, lingerMs);
    const c = client as { isCluster?: boolean; constructor?: { name?: string } } | undefined;
    this.cluster = c?.isCluster === true || c?.constructor?.name === 'RedisCluster';
  }

  async acquire(key: string, req: AcquireRequest): Promise<Grant | null> {
    const k = redisKeys(key);
    const digest = req.queue ? digestOf(req.token) : '';
    const wakes = req.queue ? this.wakeups.before(digest) : 0;
    let r: unknown;
    try {
      [r] = await this.adapter.run([
        {
          script: ACQUIRE,
          keys: [k.lock, k.fence, k.q, k.qx, k.value],
          args: [req.token, req.ttlMs, req.queue ? '1' : '0', req.value ?? ''],
        },
      ]);
      if (r instanceof Error) throw r;
    } catch (e) {
      if (req.queue) this.wakeups.forget(key, digest);
      throw e;
    }
    if (typeof r === 'string') {
      if (req.queue) this.wakeups.forget(key, digest);
      return { fence: BigInt(r) };
    }
    if (req.queue) this.wakeups.refused(key, digest, wakes, -Number(r));
    return null;
  }

  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    if (items.length === 0) return [];
    if (this.cluster) {
      // keys of many slots: one script per lease, pipelined
      return this.flags(
        await this.adapter.run(
          items.map(({ key, token, ttlMs }) => {
            const k = redisKeys(key);
            return { script: EXTEND, keys: [k.lock, k.value], args: [token, ttlMs] };
          }),
        ),
      );
    }
    const calls = [];
    for (let i = 0; i < items.length; i += CHUNK) {
      const keys: string[] = [];
      const args: (string | number)[] = [];
      for (let j = i; j < Math.min(items.length, i + CHUNK); j++) {
        const { key, token, ttlMs } = items[j]!;
        const k = `{${key}}`;
        keys.push(k, `${k}:v`);
        args.push(token, ttlMs);
      }
      calls.push({ script: EXTEND_MANY, keys, args });
    }
    return this.flags(await this.adapter.run(calls));
  }

  private flags(res: unknown[]): boolean[] {
    const out: boolean[] = [];
    for (const r of res) {
      if (r instanceof Error) throw r;
      if (Array.isArray(r)) for (const x of r) out.push(Number(x) === 1);
      else out.push(Number(r) === 1);
    }
    return out;
  }

  async release(key: string, token: string): Promise<boolean> {
    const k = redisKeys(key);
    const [r] = await this.adapter.run([
      { script: RELEASE, keys: [k.lock, k.value, k.q, k.qx], args: [token, k.channel] },
    ]);
    if (r instanceof Error) throw r;
    return Number(r) === 1;
  }

  async leave(key: string, token: string): Promise<void> {
    const k = redisKeys(key);
    this.wakeups.forget(key, digestOf(token));
    const [r] = await this.adapter.run([{ script: LEAVE, keys: [k.q, k.qx, k.lock], args: [token, k.channel] }]);
    if (r instanceof Error) throw r;
  }

  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    return this.wakeups.wait(key, redisKeys(key).channel, signal, maxMs);
  }

  async inspect(key: string): Promise<LockInfo | null> {
    const k = redisKeys(key);
    const [r] = await this.adapter.run([{ script: INSPECT, keys: [k.lock, k.fence, k.value], args: [] }]);
    if (r instanceof Error) throw r;
    if (!Array.isArray(r)) return null;
    const [fence, pttl, value] = r as [string, number, string | null];
    const info: LockInfo = { key, fence: BigInt(fence), remainingMs: Number(pttl) };
    return value === null || value === undefined ? info : { ...info, value: String(value) };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeups.close();
    await this.adapter.close();
  }
}
