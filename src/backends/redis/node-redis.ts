/**
 * The adapter over a node-redis (v4+) client or cluster: see client.ts. A pool
 * (`createClientPool()`) is not supported: the types and adapt.ts refuse it.
 */
import { inspect } from 'node:util';
import {
  CLOSE_TIMEOUT_MS,
  hidden,
  isNoScript,
  keyPrefixOf,
  noScriptAt,
  settledWithin,
  wrap,
  type MessageListener,
  type RedisAdapter,
  type ScriptCall,
} from './client.js';

/**
 * A reply as text: a client may map strings to Buffers (`withTypeMapping`, RESP2 or 3), and the
 * backends read a script's strings as strings (a fence as a Buffer read as a refusal: the lock
 * stayed held, by nobody). Replies are short: at most a few strings per lease.
 */
function text(r: unknown): unknown {
  if (typeof r !== 'object' || r === null) return r;
  if (r instanceof Uint8Array) return Buffer.from(r.buffer, r.byteOffset, r.byteLength).toString();
  return Array.isArray(r) ? r.map(text) : r;
}

/** A node-redis command option: no per-command timer (see NodeRedisAdapter.sendOptions). */
const NO_TIMEOUT = { timeout: 0 };

export class NodeRedisAdapter implements RedisAdapter {
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
  /**
   * The options of those raw calls. node-redis 6 bounds every command by its client's
   * `commandOptions.timeout`, 5 s unless set: an `AbortSignal.timeout` and an abort listener per
   * command, whose timer fires (waking the process) seconds after the reply came. The engine
   * bounds each call itself (opTimeout, and a late grant is given back), so unless the client was
   * given a timeout of its own, our calls go without one: per contended grant (8 processes, one
   * key), 2 abort listeners and ~0.7–1.2 process wake-ups fewer. Older node-redis ignores it.
   */
  private readonly sendOptions: { timeout: number } | undefined;
  readonly keyPrefix: string;
  readonly unprefixed: boolean;
  constructor(private readonly client: any) {
    const kp = keyPrefixOf(client);
    this.keyPrefix = kp ?? '';
    this.unprefixed = kp === '';
    this.cluster = typeof client.getSlotMaster === 'function' && typeof client.sSubscribe === 'function';
    // `sendCommand(args, options)`: a client or a pool; a Sentinel's and a cluster's take more
    this.raw = !this.cluster && typeof client.sendCommand === 'function' && client.sendCommand.length === 2;
    this.raw &&= kp === '';
    this.sendOptions = client.options?.commandOptions?.timeout === undefined ? NO_TIMEOUT : undefined;
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
        r = await this.client.sendCommand(cmd, this.sendOptions);
      } catch (e) {
        if (!isNoScript(e)) return [wrap(e)];
        cmd[0] = 'EVAL';
        cmd[1] = s.source;
        try {
          r = await this.client.sendCommand(cmd, this.sendOptions);
        } catch (e2) {
          return [wrap(e2)];
        }
      }
      return [r instanceof Error ? wrap(r) : text(r)];
    }
    // node-redis pipelines every command issued in the same tick into one write (per node on a
    // cluster, where it routes each call by its first key and follows MOVED/ASK).
    // Only the calls refused with NOSCRIPT (they did not run) go again, with EVAL: the others
    // ran, and their replies stand (a call run twice would lose what its first run returned).
    const once = (batch: readonly ScriptCall[], useEval: boolean) =>
      Promise.all(
        batch.map(({ script: s, keys, args }) => {
          const opts = { keys: [...keys], arguments: args.map(String) };
          const p = useEval ? this.client.eval(s.source, opts) : this.client.evalSha(s.sha, opts);
          return (p as Promise<unknown>).catch((e: unknown) => (e instanceof Error ? e : new Error(String(e))));
        }),
      );
    const res = await once(calls, false);
    const again = noScriptAt(res);
    if (again.length > 0) {
      const more = await once(
        again.map((i) => calls[i]!),
        true,
      );
      again.forEach((i, j) => (res[i] = more[j]));
    }
    return res.map((r) => (r instanceof Error ? wrap(r) : text(r)));
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
