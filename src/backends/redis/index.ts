/**
 * Single-node Redis backend for ioredis and node-redis. Acquire: one script (SET NX PX + INCR of
 * the fence, fair arrival queue). Release: one script (compare-and-delete + PUBLISH). Extend:
 * one script per lease, all of a batch pipelined in one round trip. Waiters subscribe to the
 * key's channel on one shared subscriber connection and poll (bounded by the holder's TTL) if
 * a message is missed.
 */
import type { AcquireRequest, Backend, ExtendItem, Grant, LockInfo, ResultStore } from '../../backend.js';
import { checkOptions } from '../../validate.js';
import { adapt, type RedisAdapter } from './client.js';
import { GET_RESULT, ACQUIRE, EXTEND, INSPECT, LEAVE, PUT_RESULT, RELEASE } from './scripts.js';

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

interface Sub {
  ready: Promise<boolean>;
  waiters: Set<() => void>;
  generation: number;
  linger: NodeJS.Timeout | null;
}

export function redis(client: unknown, options?: RedisOptions): RedisBackend {
  const o = checkOptions<RedisOptions>(options, ['lingerMs'], 'redis');
  return new RedisBackend(adapt(client, 'redis(client)'), o.lingerMs ?? 2000);
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
  private readonly subs = new Map<string, Sub>();
  /** Per key: the message generation seen when the last acquire was sent, and the holder's pttl. */
  private readonly seen = new Map<string, { generation: number; hintMs: number }>();
  private closed = false;

  constructor(
    readonly adapter: RedisAdapter,
    private readonly lingerMs: number,
  ) {}

  async acquire(key: string, req: AcquireRequest): Promise<Grant | null> {
    const k = redisKeys(key);
    const generation = this.subs.get(k.channel)?.generation ?? 0;
    const [r] = await this.adapter.run([
      {
        script: ACQUIRE,
        keys: [k.lock, k.fence, k.q, k.qx, k.value],
        args: [req.token, req.ttlMs, req.queue ? '1' : '0', req.value ?? ''],
      },
    ]);
    if (r instanceof Error) throw r;
    if (typeof r === 'string') {
      this.seen.delete(key);
      return { fence: BigInt(r) };
    }
    if (req.queue) this.seen.set(key, { generation, hintMs: -Number(r) });
    return null;
  }

  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    if (items.length === 0) return [];
    const res = await this.adapter.run(
      items.map(({ key, token, ttlMs }) => {
        const k = redisKeys(key);
        return { script: EXTEND, keys: [k.lock, k.value], args: [token, ttlMs] };
      }),
    );
    const failed = res.find((r) => r instanceof Error);
    if (failed) throw failed;
    return res.map((r) => Number(r) === 1);
  }

  async release(key: string, token: string): Promise<boolean> {
    const k = redisKeys(key);
    const [r] = await this.adapter.run([{ script: RELEASE, keys: [k.lock, k.value], args: [token, k.channel] }]);
    if (r instanceof Error) throw r;
    return Number(r) === 1;
  }

  async leave(key: string, token: string): Promise<void> {
    const k = redisKeys(key);
    this.seen.delete(key);
    const [r] = await this.adapter.run([{ script: LEAVE, keys: [k.q, k.qx, k.lock], args: [token, k.channel] }]);
    if (r instanceof Error) throw r;
  }

  async waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted || this.closed) return;
    const channel = redisKeys(key).channel;
    const sub = this.subs.get(channel);
    if (!sub) {
      const s: Sub = { ready: Promise.resolve(false), waiters: new Set(), generation: 0, linger: null };
      s.ready = this.adapter
        .subscribe(channel, () => {
          s.generation++;
          for (const w of [...s.waiters]) w();
        })
        .then(
          () => true,
          () => false,
        );
      this.subs.set(channel, s);
      // newly subscribed: a release may have slipped by before the subscription existed, so
      // return at once and let the caller try again, now with push in place
      const ok = await s.ready;
      if (ok) return;
      this.subs.delete(channel);
      await this.sleep(signal, maxMs);
      return;
    }
    if (sub.linger) {
      clearTimeout(sub.linger);
      sub.linger = null;
    }
    const seen = this.seen.get(key);
    if (seen && seen.generation !== sub.generation) return; // a release raced our last attempt
    // a holder that crashes wakes nobody: retry at its expiry at the latest
    const hint = seen && seen.hintMs > 0 ? seen.hintMs + 2 : maxMs;
    const s = sub;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        s.waiters.delete(done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(1, Math.min(maxMs, hint)));
      s.waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
    if (s.waiters.size === 0 && !s.linger && !this.closed) {
      s.linger = setTimeout(() => {
        if (s.waiters.size > 0 || this.subs.get(channel) !== s) return;
        this.subs.delete(channel);
        this.adapter.unsubscribe(channel).catch(() => {});
      }, this.lingerMs);
      s.linger.unref();
    }
  }

  private sleep(signal: AbortSignal, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const t = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
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
    for (const s of this.subs.values()) {
      if (s.linger) clearTimeout(s.linger);
      for (const w of [...s.waiters]) w();
    }
    this.subs.clear();
    await this.adapter.close();
  }
}
