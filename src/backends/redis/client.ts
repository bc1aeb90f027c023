/**
 * A thin adapter over the two Redis clients users have: ioredis and node-redis (v4+). Shared by
 * the redis and redlock backends. Scripts run by EVALSHA with an EVAL fallback on NOSCRIPT, and
 * keys and tokens travel only as KEYS/ARGV.
 */
import { createHash } from 'node:crypto';
import { BackendError, InvalidArgumentError } from '../../errors.js';

export interface Script {
  readonly source: string;
  readonly sha: string;
}

export function script(source: string): Script {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

export interface ScriptCall {
  readonly script: Script;
  readonly keys: readonly string[];
  readonly args: readonly (string | number)[];
}

export type MessageListener = (channel: string, message: string) => void;

export interface RedisAdapter {
  readonly kind: 'ioredis' | 'node-redis';
  /** Runs scripts in one round trip (pipelined); results in order, an Error per failed call. */
  run(calls: readonly ScriptCall[]): Promise<unknown[]>;
  /** A second connection for SUBSCRIBE, created on first use and closed by `close()`. */
  subscribe(channel: string, listener: MessageListener): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  close(): Promise<void>;
}

/** How long close() lets a subscriber connection say goodbye before dropping it. */
const CLOSE_TIMEOUT_MS = 1000;

/** 'ok', 'error' or 'timeout', never rejecting. */
function settleWithin(p: Promise<unknown>, ms: number): Promise<'ok' | 'error' | 'timeout'> {
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve('timeout'), ms);
    p.then(
      () => (clearTimeout(t), resolve('ok')),
      () => (clearTimeout(t), resolve('error')),
    );
  });
}

const isNoScript = (e: unknown) => e instanceof Error && /NOSCRIPT/i.test(e.message);

/** Detects the client type. Throws InvalidArgumentError for anything else. */
export function adapt(client: unknown, what = 'client'): RedisAdapter {
  const c = client as any;
  if (c && typeof c === 'object') {
    if (typeof c.evalsha === 'function' && typeof c.pipeline === 'function' && typeof c.duplicate === 'function') {
      return new IoredisAdapter(c);
    }
    if (typeof c.evalSha === 'function' && typeof c.duplicate === 'function') return new NodeRedisAdapter(c);
  }
  throw new InvalidArgumentError(`${what} must be an ioredis or node-redis (v4+) client`);
}

function wrap(e: unknown): Error {
  return e instanceof Error ? new BackendError(`redis: ${e.message}`, { cause: e }) : new BackendError(String(e));
}

class IoredisAdapter implements RedisAdapter {
  readonly kind = 'ioredis' as const;
  private sub: any = null;
  private subReady: Promise<any> | null = null;
  private readonly listeners = new Map<string, MessageListener>();
  constructor(private readonly client: any) {}

  async run(calls: readonly ScriptCall[]): Promise<unknown[]> {
    const once = async (useEval: boolean) => {
      if (calls.length === 1) {
        const { script: s, keys, args } = calls[0]!;
        try {
          const r = useEval
            ? await this.client.eval(s.source, keys.length, ...keys, ...args)
            : await this.client.evalsha(s.sha, keys.length, ...keys, ...args);
          return [r];
        } catch (e) {
          return [e as Error];
        }
      }
      const p = this.client.pipeline();
      for (const { script: s, keys, args } of calls) {
        if (useEval) p.eval(s.source, keys.length, ...keys, ...args);
        else p.evalsha(s.sha, keys.length, ...keys, ...args);
      }
      const out: [Error | null, unknown][] = await p.exec();
      return out.map(([err, r]) => err ?? r);
    };
    let res = await once(false).catch((e) => {
      throw wrap(e);
    });
    if (res.some(isNoScript)) {
      res = await once(true).catch((e) => {
        throw wrap(e);
      });
    }
    return res.map((r) => (r instanceof Error ? wrap(r) : r));
  }

  private connectSub(): Promise<any> {
    if (!this.subReady) {
      const sub = this.client.duplicate({ lazyConnect: false, enableAutoPipelining: false });
      this.sub = sub;
      sub.on('error', () => {}); // reconnects on its own; waiters fall back to bounded polling
      sub.on('message', (channel: string, message: string) => this.listeners.get(channel)?.(channel, String(message)));
      this.subReady = Promise.resolve(sub);
    }
    return this.subReady as Promise<any>;
  }

  async subscribe(channel: string, listener: MessageListener): Promise<void> {
    this.listeners.set(channel, listener);
    const sub = await this.connectSub();
    await sub.subscribe(channel);
  }

  async unsubscribe(channel: string): Promise<void> {
    this.listeners.delete(channel);
    if (this.sub) await this.sub.unsubscribe(channel).catch(() => {});
  }

  async close(): Promise<void> {
    const sub = this.sub;
    this.sub = null;
    this.subReady = null;
    this.listeners.clear();
    if (sub) {
      // QUIT waits for the server: bounded, so a frozen (SIGSTOPped) node cannot hang close().
      const quit = await settleWithin(sub.quit(), CLOSE_TIMEOUT_MS);
      if (quit !== 'ok') sub.disconnect();
    }
  }
}

class NodeRedisAdapter implements RedisAdapter {
  readonly kind = 'node-redis' as const;
  private sub: any = null;
  private subReady: Promise<any> | null = null;
  constructor(private readonly client: any) {}

  async run(calls: readonly ScriptCall[]): Promise<unknown[]> {
    // node-redis pipelines every command issued in the same tick into one write.
    const once = (useEval: boolean) =>
      Promise.all(
        calls.map(({ script: s, keys, args }) => {
          const opts = { keys: [...keys], arguments: args.map(String) };
          const p = useEval ? this.client.eval(s.source, opts) : this.client.evalSha(s.sha, opts);
          return (p as Promise<unknown>).catch((e: unknown) => (e instanceof Error ? e : new Error(String(e))));
        }),
      );
    let res = await once(false);
    if (res.some(isNoScript)) res = await once(true);
    return res.map((r) => (r instanceof Error ? wrap(r) : r));
  }

  private connectSub(): Promise<any> {
    if (!this.subReady) {
      const sub = this.client.duplicate();
      this.sub = sub;
      sub.on('error', () => {});
      this.subReady = sub.connect().then(() => sub);
    }
    return this.subReady as Promise<any>;
  }

  async subscribe(channel: string, listener: MessageListener): Promise<void> {
    const sub = await this.connectSub();
    await sub.subscribe(channel, (message: unknown) => listener(channel, String(message)));
  }

  async unsubscribe(channel: string): Promise<void> {
    if (this.sub) await this.sub.unsubscribe(channel).catch(() => {});
  }

  async close(): Promise<void> {
    const sub = this.sub;
    const ready = this.subReady;
    this.sub = null;
    this.subReady = null;
    if (!sub) return;
    // Bounded at every step, so a frozen (SIGSTOPped) node cannot hang close().
    const connected = ready ? await settleWithin(ready, CLOSE_TIMEOUT_MS) : 'error';
    const quit =
      connected === 'ok' ? await settleWithin(sub.close ? sub.close() : sub.quit(), CLOSE_TIMEOUT_MS) : 'error';
    if (quit !== 'ok') {
      try {
        if (sub.destroy) sub.destroy();
        else sub.disconnect();
      } catch {
        /* already gone */
      }
    }
  }
}
