/**
 * The adapter over an ioredis client (a `Redis` or a `Cluster`): see client.ts.
 */
import { inspect } from 'node:util';
import {
  CLOSE_TIMEOUT_MS,
  hidden,
  isNoScript,
  keyPrefixOf,
  noScriptAt,
  runPerNode,
  settledWithin,
  wrap,
  type MessageListener,
  type RedisAdapter,
  type ScriptCall,
} from './client.js';

export class IoredisAdapter implements RedisAdapter {
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
  readonly unprefixed: boolean;
  constructor(private readonly client: any) {
    this.cluster = client.isCluster === true;
    const kp = keyPrefixOf(client);
    this.keyPrefix = kp ?? '';
    this.unprefixed = kp === '';
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

  /** The connections corked until the end of this tick (see `beforeSend`), or null. */
  private corked: { uncork(): void }[] | null = null;
  /** Commands sent in this tick so far. */
  private sent = 0;
  /** The last tick sent more than one command: the next one corks from its first command. */
  private busy = false;
  private readonly endTick = () => {
    this.busy = this.sent > 1;
    this.sent = 0;
    const streams = this.corked;
    if (streams === null) return;
    this.corked = null;
    for (const s of streams) s.uncork();
  };

  /**
   * Called before every command. While commands come one per tick (a caller that acquires and
   * releases in turn), each is written at once: no deferral, one plain write. Once a tick sends
   * more than one (many acquires and releases in flight), the commands of each tick are corked
   * until the next one, so they leave in one write (one syscall, and one read on the server)
   * instead of one each, as node-redis does on its own and ioredis with `enableAutoPipelining`.
   * A tick is the run of callbacks, ticks and microtasks before Node's next `process.nextTick`
   * turn. On a Cluster, every master's connection. Not a connection that is not ready (ioredis
   * queues the command).
   */
  private beforeSend(): void {
    const n = this.sent++;
    if (n === 0) process.nextTick(this.endTick);
    if (this.corked !== null || (n === 0 && !this.busy)) return;
    const c = this.client;
    const conns: any[] = this.cluster ? c.nodes('master') : [c];
    const streams: { uncork(): void }[] = [];
    for (const conn of conns) {
      const stream = conn.status === 'ready' ? conn.stream : null;
      if (!stream || typeof stream.cork !== 'function' || !stream.writable) continue;
      stream.cork();
      streams.push(stream);
    }
    this.corked = streams;
  }

  /**
   * A pipeline of EVALSHA; the calls refused with NOSCRIPT (they did not run) are sent again with
   * EVAL, and only they: the others ran, and their replies stand (a call run twice would lose what
   * its first run returned, such as a session's `:lost` tokens).
   */
  private async runMany(calls: readonly ScriptCall[]): Promise<unknown[]> {
    const once = async (batch: readonly ScriptCall[], useEval: boolean) => {
      this.beforeSend();
      const p = this.client.pipeline();
      for (const { script: s, keys, args } of batch) {
        if (useEval) p.eval(s.source, keys.length, ...keys, ...args);
        else p.evalsha(s.sha, keys.length, ...keys, ...args);
      }
      const out: [Error | null, unknown][] = await p.exec();
      return out.map(([err, r]) => err ?? r);
    };
    const res = await once(calls, false).catch((e) => {
      throw wrap(e);
    });
    const again = noScriptAt(res);
    if (again.length > 0) {
      const more = await once(
        again.map((i) => calls[i]!),
        true,
      ).catch((e) => {
        throw wrap(e);
      });
      again.forEach((i, j) => (res[i] = more[j]));
    }
    return res.map((r) => (r instanceof Error ? wrap(r) : r));
  }

  private evalOne({ script: s, keys, args }: ScriptCall, useEval: boolean): Promise<unknown> {
    this.beforeSend();
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
