/**
 * A thin adapter over the two Redis clients users have: ioredis and node-redis (v4+). Shared by
 * the redis and redlock backends. Scripts run by EVALSHA with an EVAL fallback on NOSCRIPT, and
 * keys and tokens travel only as KEYS/ARGV.
 */
import { digestHex } from '../../hash.js';
import { inspect } from 'node:util';
import { BackendError, InvalidArgumentError } from '../../errors.js';
import { scrubError } from '../../scrub.js';
import { race } from '../../wait.js';
import { slotOf } from './slots.js';

/**
 * The ioredis client methods leasehold calls (a `Redis` or a `Cluster`). Structural on purpose:
 * leasehold's declarations never import ioredis, so a project without it still type-checks.
 */
export interface IoredisLike {
  evalsha(...args: never[]): unknown;
  eval(...args: never[]): unknown;
  pipeline(...args: never[]): unknown;
  duplicate(...args: never[]): unknown;
}

/** The node-redis (v4+) client methods leasehold calls (`createClient()`, connected). */
export interface NodeRedisLike {
  evalSha(...args: never[]): unknown;
  eval(...args: never[]): unknown;
  duplicate(...args: never[]): unknown;
}

/** An ioredis or node-redis client: what `redis()`, `redlock()` and `fencedSet()` accept. */
export type RedisClientLike = IoredisLike | NodeRedisLike;

export interface Script {
  readonly source: string;
  readonly sha: string;
}

export function script(source: string): Script {
  return { source, sha: digestHex('sha1', source) };
}

export interface ScriptCall {
  readonly script: Script;
  readonly keys: readonly string[];
  readonly args: readonly (string | number)[];
}

export type MessageListener = (channel: string, message: string) => void;

export interface RedisAdapter {
  readonly kind: 'ioredis' | 'node-redis';
  /**
   * The prefix the client puts on every key it sends (its `keyPrefix`), '' if none. Scripts see
   * prefixed keys; channels are never prefixed, so a key a script publishes is read back with it.
   */
  readonly keyPrefix: string;
  /** A Redis Cluster client (ioredis `Cluster`, node-redis `createCluster`). */
  readonly cluster: boolean;
  /**
   * Runs scripts in one round trip per node (pipelined); results in order, an Error per failed
   * call. On a cluster each call's keys must share one slot; calls go to their slots' masters.
   */
  run(calls: readonly ScriptCall[]): Promise<unknown[]>;
  /**
   * One adapter per master (each runs keyless scripts such as SCAN on that node); `[this]` for
   * a single server. The adapters share the user's connections and own nothing to close.
   */
  masters(): Promise<RedisAdapter[]>;
  /**
   * Cluster: an adapter on the master that serves `slot` by the client's current slot table
   * (scripts sent through it reach that node only, with no redirection), or null if unknown.
   */
  nodeFor?(slot: number): Promise<{ id: string; adapter: RedisAdapter } | null>;
  /** A second connection for SUBSCRIBE, created on first use and closed by `close()`. */
  subscribe(channel: string, listener: MessageListener): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  close(): Promise<void>;
}

/** How long close() lets a subscriber connection say goodbye before dropping it. */
const CLOSE_TIMEOUT_MS = 1000;

/** True if `p` fulfilled within `ms`; never rejects. */
const settledWithin = (p: Promise<unknown>, ms: number): Promise<boolean> =>
  race(p, { ms }).then(
    () => true,
    () => false,
  );

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

/**
 * A client error as a BackendError whose cause is scrubbed: ioredis attaches the command's
 * arguments (lease tokens) to reply errors, and a client error may reach the client's options.
 */
function wrap(e: unknown): Error {
  if (e instanceof BackendError) return scrubError(e);
  const cause = scrubError(e);
  return new BackendError(`redis: ${cause.message}`, { cause });
}

/** Neither the client nor its options (a password) print, at any depth. */
const hidden = (kind: string) => `RedisAdapter { ${kind} }`;

class IoredisAdapter implements RedisAdapter {
  readonly kind = 'ioredis' as const;
  readonly cluster: boolean;
  [inspect.custom](): string {
    return hidden(this.kind);
  }
  toJSON(): { kind: string } {
    return { kind: this.kind };
  }
  /** Subscriber connections: one, or on a Cluster one per master (see connectSub). */
  private subs: any[] | null = null;
  private readonly listeners = new Map<string, MessageListener>();
  readonly keyPrefix: string;
  constructor(private readonly client: any) {
    this.cluster = client.isCluster === true;
    this.keyPrefix = keyPrefixOf(client) ?? '';
  }

  run(calls: readonly ScriptCall[]): Promise<unknown[]> {
    // not async: one promise (and one microtask) fewer on every acquire and release
    if (this.cluster && calls.length > 1) return runPerNode(this.client, calls, (group) => this.runOne(group));
    return this.runOne(calls);
  }

  async masters(): Promise<RedisAdapter[]> {
    if (!this.cluster) return [this];
    return (this.client.nodes('master') as unknown[]).map((n) => new IoredisAdapter(n));
  }

  private readonly nodes = new Map<string, RedisAdapter>();
  async nodeFor(slot: number): Promise<{ id: string; adapter: RedisAdapter } | null> {
    const id = (this.client.slots?.[slot] as string[] | undefined)?.[0];
    if (!this.cluster || !id) return null;
    let adapter = this.nodes.get(id);
    if (!adapter) {
      const node = (this.client.nodes('master') as any[]).find((n) => `${n.options.host}:${n.options.port}` === id);
      if (!node) return null;
      this.nodes.set(id, (adapter = new IoredisAdapter(node)));
    }
    return { id, adapter };
  }

  private runOne(calls: readonly ScriptCall[]): Promise<unknown[]> {
    if (calls.length === 1) return this.runSingle(calls[0]!);
    return this.runMany(calls);
  }

  /** The common case (an acquire, a release): no pipeline, one reply. */
  private async runSingle(call: ScriptCall): Promise<unknown[]> {
    let r: unknown;
    try {
      r = await this.evalOne(call, false);
    } catch (e) {
      if (!isNoScript(e)) return [wrap(e)];
      try {
        r = await this.evalOne(call, true);
      } catch (e2) {
        return [wrap(e2)];
      }
    }
    return [r instanceof Error ? wrap(r) : r];
  }

  /** The connections corked until the end of this tick (see `cork`), or null. */
  private corked: { uncork(): void }[] | null = null;
  private readonly uncork = () => {
    const streams = this.corked ?? [];
    this.corked = null;
    for (const s of streams) s.uncork();
  };

  /**
   * Every command sent on the connection in this tick leaves in one write, on the next tick (as
   * node-redis does on its own, and ioredis with `enableAutoPipelining`): with many acquires and
   * releases in flight, one syscall (and one read on the server) for all of them instead of one
   * each. A lone command waits only for the current tick's callbacks. On a Cluster, every
   * master's connection. Not a connection that is not ready (ioredis queues the command).
   */
  private cork(): void {
    const c = this.client;
    const conns: any[] = this.cluster ? c.nodes('master') : [c];
    const streams: { uncork(): void }[] = [];
    for (const conn of conns) {
      const stream = conn.status === 'ready' ? conn.stream : null;
      if (!stream || typeof stream.cork !== 'function' || !stream.writable) continue;
      stream.cork();
      streams.push(stream);
    }
    if (streams.length === 0) return;
    this.corked = streams;
    process.nextTick(this.uncork);
  }

  private async runMany(calls: readonly ScriptCall[]): Promise<unknown[]> {
    const once = async (useEval: boolean) => {
      if (this.corked === null) this.cork();
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

  private evalOne({ script: s, keys, args }: ScriptCall, useEval: boolean): Promise<unknown> {
    if (this.corked === null) this.cork();
    return useEval
      ? this.client.eval(s.source, keys.length, ...keys, ...args)
      : this.client.evalsha(s.sha, keys.length, ...keys, ...args);
  }

  /**
   * On a Cluster, one subscriber per master known at the first subscription: a message published
   * on a master reaches that master's own subscribers at once, while the cluster bus relays it to
   * the other nodes up to ~40 ms late (its node-to-node links do not set TCP_NODELAY: Redis issue
   * 11869, Valkey 1758). A message then arrives once per master (the extra copies late): every
   * listener here takes repeats (a wake-up re-attempts, a watcher re-reads). After a failover a
   * new master's messages still arrive, through the bus.
   */
  private connectSub(): any[] {
    if (!this.subs) {
      const opts = { lazyConnect: false, enableAutoPipelining: false };
      const masters: any[] = this.cluster ? this.client.nodes('master') : [];
      // a Cluster's duplicate takes (startupNodes, options); [] keeps the original nodes
      const subs =
        masters.length > 0
          ? masters.map((n) => n.duplicate(opts))
          : [this.cluster ? this.client.duplicate([], opts) : this.client.duplicate(opts)];
      for (const sub of subs) {
        sub.on('error', () => {}); // reconnects on its own; waiters fall back to bounded polling
        sub.on('message', (channel: string, message: string) =>
          this.listeners.get(channel)?.(channel, String(message)),
        );
      }
      this.subs = subs;
    }
    return this.subs;
  }

  async subscribe(channel: string, listener: MessageListener): Promise<void> {
    this.listeners.set(channel, listener);
    const subs = this.connectSub();
    // subscribed once any node confirms: every node delivers every message (the bus relays it)
    await Promise.any(subs.map((sub) => sub.subscribe(channel))).catch((e: unknown) => {
      throw e instanceof AggregateError ? e.errors[0] : e;
    });
  }

  async unsubscribe(channel: string): Promise<void> {
    this.listeners.delete(channel);
    if (this.subs) await Promise.all(this.subs.map((sub) => sub.unsubscribe(channel).catch(() => {})));
  }

  async close(): Promise<void> {
    const subs = this.subs ?? [];
    this.subs = null;
    this.listeners.clear();
    await Promise.all(
      subs.map(async (sub) => {
        // QUIT waits for the server: bounded, so a frozen (SIGSTOPped) node cannot hang close().
        if (!(await settledWithin(sub.quit(), CLOSE_TIMEOUT_MS))) sub.disconnect();
      }),
    );
  }
}

class NodeRedisAdapter implements RedisAdapter {
  readonly kind = 'node-redis' as const;
  /** node-redis routes each command to its slot's master and follows MOVED/ASK itself. */
  readonly cluster: boolean;
  [inspect.custom](): string {
    return hidden(this.kind);
  }
  toJSON(): { kind: string } {
    return { kind: this.kind };
  }
  /** Subscriber connections (connectSub); `sub` is set once its client exists. */
  private subs: { sub: any; ready: Promise<any> }[] | null = null;
  /**
   * Scripts may go through `sendCommand` as they are: one server (not a cluster, which routes by
   * key) and no `keyPrefix` (which node-redis adds to KEYS only through its own commands).
   */
  private readonly raw: boolean;
  readonly keyPrefix: string;
  constructor(private readonly client: any) {
    const kp = keyPrefixOf(client);
    this.keyPrefix = kp ?? '';
    this.cluster = typeof client.getSlotMaster === 'function' && typeof client.sSubscribe === 'function';
    // `sendCommand(args, options)`: a client or a pool; a Sentinel's and a cluster's take more
    this.raw = !this.cluster && typeof client.sendCommand === 'function' && client.sendCommand.length === 2;
    this.raw &&= kp === '';
  }

  async run(calls: readonly ScriptCall[]): Promise<unknown[]> {
    if (calls.length === 1 && this.raw) {
      // the common case (an acquire, a release) on one server: the command as it goes on the
      // wire, without node-redis's per-command parser (which would only copy it)
      const { script: s, keys, args } = calls[0]!;
      const cmd: string[] = ['EVALSHA', s.sha, String(keys.length)];
      for (const k of keys) cmd.push(k);
      for (const a of args) cmd.push(typeof a === 'string' ? a : String(a));
      let r: unknown;
      try {
        r = await this.client.sendCommand(cmd);
      } catch (e) {
        if (!isNoScript(e)) return [wrap(e)];
        cmd[0] = 'EVAL';
        cmd[1] = s.source;
        try {
          r = await this.client.sendCommand(cmd);
        } catch (e2) {
          return [wrap(e2)];
        }
      }
      return [r instanceof Error ? wrap(r) : r];
    }
    // node-redis pipelines every command issued in the same tick into one write (per node on a
    // cluster, where it routes each call by its first key and follows MOVED/ASK).
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

  async masters(): Promise<RedisAdapter[]> {
    if (!this.cluster) return [this];
    const nodes = this.client.masters as unknown[];
    return Promise.all(nodes.map(async (n) => new NodeRedisAdapter(await this.client.nodeClient(n))));
  }

  private readonly nodes = new Map<string, { client: unknown; adapter: RedisAdapter }>();
  async nodeFor(slot: number): Promise<{ id: string; adapter: RedisAdapter } | null> {
    if (!this.cluster) return null;
    const master = this.client.getSlotMaster(slot) as { address?: string } | undefined;
    if (!master?.address) return null;
    const client = await this.client.nodeClient(master);
    let e = this.nodes.get(master.address);
    if (!e || e.client !== client)
      this.nodes.set(master.address, (e = { client, adapter: new NodeRedisAdapter(client) }));
    return { id: master.address, adapter: e.adapter };
  }

  /** Subscriber connections; on a Cluster one per master, as IoredisAdapter.connectSub says why. */
  private connectSub(): { sub: any; ready: Promise<any> }[] {
    if (!this.subs) {
      const masters: any[] = this.cluster ? this.client.masters : [];
      const starts: Promise<any>[] =
        masters.length > 0
          ? masters.map((m) => Promise.resolve(this.client.nodeClient(m)).then((c: any) => c.duplicate()))
          : [Promise.resolve(this.client.duplicate())];
      this.subs = starts.map((start) => {
        const entry = { sub: null as any, ready: Promise.resolve(null as any) };
        entry.ready = start.then((sub: any) => {
          entry.sub = sub;
          sub.on('error', () => {});
          return sub.connect().then(() => sub);
        });
        entry.ready.catch(() => {});
        return entry;
      });
    }
    return this.subs;
  }

  async subscribe(channel: string, listener: MessageListener): Promise<void> {
    const subs = this.connectSub();
    // subscribed once any node confirms: every node delivers every message (the bus relays it)
    await Promise.any(
      subs.map(async ({ ready }) => (await ready).subscribe(channel, (m: unknown) => listener(channel, String(m)))),
    ).catch((e: unknown) => {
      throw e instanceof AggregateError ? e.errors[0] : e;
    });
  }

  async unsubscribe(channel: string): Promise<void> {
    if (this.subs)
      await Promise.all(this.subs.map(({ sub }) => (sub ? sub.unsubscribe(channel).catch(() => {}) : undefined)));
  }

  async close(): Promise<void> {
    const subs = this.subs ?? [];
    this.subs = null;
    await Promise.all(
      subs.map(async (entry) => {
        // Bounded at every step, so a frozen (SIGSTOPped) node cannot hang close().
        const connected = await settledWithin(entry.ready, CLOSE_TIMEOUT_MS);
        const sub = entry.sub; // read after waiting: a close() right after subscribe() finds it set
        if (!sub) return;
        const quit = connected && (await settledWithin(sub.close ? sub.close() : sub.quit(), CLOSE_TIMEOUT_MS));
        if (!quit) {
          try {
            if (sub.destroy) sub.destroy();
            else sub.disconnect();
          } catch {
            /* already gone */
          }
        }
      }),
    );
  }
}

/**
 * The client's `keyPrefix`, '' if none: ioredis `options.keyPrefix` (a Cluster's may sit in
 * `redisOptions`), node-redis (v5.x+) `_keyPrefix` (a pool's in `clientOptions`). Null when it
 * cannot be read or is not a string (a Buffer): then nothing may assume there is none.
 */
function keyPrefixOf(client: any): string | null {
  try {
    const o = client.options;
    const p = client._keyPrefix ?? o?.keyPrefix ?? o?.redisOptions?.keyPrefix ?? o?.clientOptions?.keyPrefix;
    return p === undefined ? '' : typeof p === 'string' ? p : null;
  } catch {
    return null;
  }
}

const isRedirect = (e: unknown) => e instanceof Error && /\b(MOVED|ASK|TRYAGAIN|CLUSTERDOWN)\b/.test(e.message);

/**
 * ioredis `Cluster`: a pipeline must stay within one node's slots, so calls are grouped by the
 * node that serves their slot (by the client's slot table) and each group is one pipeline, all
 * sent at once: one round trip per node. A call that met MOVED/ASK (resharding, failover) or a
 * group the client refused (its slot table changed under us) is sent again on its own, where
 * the client follows the redirection.
 */
async function runPerNode(
  client: any,
  calls: readonly ScriptCall[],
  runGroup: (calls: readonly ScriptCall[]) => Promise<unknown[]>,
): Promise<unknown[]> {
  const groups = new Map<string, number[]>();
  calls.forEach((c, i) => {
    const slot = c.keys.length ? slotOf(c.keys[0]!) : 0;
    const owner: string = (client.slots?.[slot] as string[] | undefined)?.[0] ?? `slot:${slot}`;
    const g = groups.get(owner);
    if (g) g.push(i);
    else groups.set(owner, [i]);
  });
  const out: unknown[] = new Array(calls.length);
  await Promise.all(
    [...groups.values()].map(async (idx) => {
      let res: unknown[] | null = null;
      try {
        res = await runGroup(idx.map((i) => calls[i]!));
      } catch {
        res = null; // the whole pipeline was refused: each call alone below
      }
      const again: number[] = [];
      idx.forEach((i, j) => {
        const r = res?.[j];
        if (!res || isRedirect(r)) again.push(i);
        else out[i] = r;
      });
      await Promise.all(
        again.map(async (i) => {
          [out[i]] = await runGroup([calls[i]!]);
        }),
      );
    }),
  );
  return out;
}
