/**
 * Redlock over N independent Redis masters, with fencing tokens that hold across the quorum.
 *
 *   acquire  round 1: SET NX PX on every node in parallel; each granting node returns its fence
 *            counter. Decided as soon as a majority granted (or cannot): stragglers never delay it.
 *            round 2: fence = max(counters of the granting nodes) + 1, written back token-checked
 *            and only upward to those nodes; the grant counts once a majority stored it and the
 *            validity ttl − elapsed − drift is still positive (monotonic clock).
 *   extend   every item in one pipelined round per node; true where a majority extended in time.
 *   release  compare-and-delete + PUBLISH on every node; true if a majority still held it.
 *
 * The safety argument and its limits are in docs/redlock.md.
 */
import type { AcquireRequest, Backend, BackendCapabilities, ExtendItem, Grant, LockInfo } from '../../backend.js';
import { BackendError, InvalidArgumentError, QuorumError } from '../../errors.js';
import type { ScriptCall } from '../redis/client.js';
import { type NodeHandle, parseClients, parseOptions, type RedlockConfig, type RedlockOptions } from './options.js';
import { bounded, causesOf, Health, type Outcome, round, tally } from './quorum.js';
import { ACQUIRE, channelOf, EXTEND, fenceKey, INSPECT, lockKey, PTTL, RELEASE, WRITE_FENCE } from './scripts.js';
import { Subscriptions } from './subscriptions.js';

export type { RedlockOptions } from './options.js';
export { reseedFences, type ReseedOptions } from './reseed.js';

/**
 * A Redlock backend over `clients` (ioredis or node-redis, each connected to an independent Redis
 * master). Needs at least 3 clients unless `allowFewerThanThree` is set. Never closes the clients.
 */
export function redlock(clients: readonly unknown[], opts?: RedlockOptions): Backend {
  const cfg = parseOptions(opts);
  const nodes = parseClients(clients, cfg.allowFewerThanThree);
  return new RedlockBackend(nodes, cfg);
}

type AcquireDecision = 'granted' | 'held' | 'quorum';
function parseCounter(r: unknown): bigint | null {
  if (!Array.isArray(r)) throw new BackendError(`redlock: unexpected acquire reply ${String(r)}`);
  if (r[0] !== 1) return null;
  const c = r[1];
  if ((typeof c !== 'string' && typeof c !== 'number') || !/^\d+$/.test(String(c))) {
    throw new BackendError(`redlock: fence counter is not a non-negative integer: ${String(c)}`);
  }
  return BigInt(c);
}

class RedlockBackend implements Backend {
  readonly name = 'redlock';
  readonly capabilities: BackendCapabilities = {
    push: true,
    fair: false,
    value: false,
    results: false,
    session: false,
  };
  private readonly quorum: number;
  private readonly all: number[];
  private readonly subs: Subscriptions[];
  private readonly waiters = new Set<() => void>();
  private readonly health: Health;
  private closed = false;

  constructor(
    private readonly nodes: readonly NodeHandle[],
    private readonly cfg: RedlockConfig,
  ) {
    this.quorum = Math.floor(nodes.length / 2) + 1;
    this.all = nodes.map((_, i) => i);
    this.subs = nodes.map((n) => new Subscriptions(n.adapter));
    this.health = new Health(nodes.length);
  }

  private readonly label = (i: number) => this.nodes[i]!.label;

  private drift(ttlMs: number): number {
    return Math.round(ttlMs * this.cfg.driftFactor) + this.cfg.driftMs;
  }

  private check(token: unknown, ttlMs: unknown, what: string): void {
    if (this.closed) throw new BackendError('redlock: backend is closed');
    if (typeof token !== 'string' || token.length === 0) {
      throw new InvalidArgumentError(`redlock ${what}: token must be a non-empty string`);
    }
    if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < 1) {
      throw new InvalidArgumentError(`redlock ${what}: ttlMs must be an integer ≥ 1, got ${String(ttlMs)}`);
    }
    if (ttlMs <= this.drift(ttlMs)) {
      throw new InvalidArgumentError(
        `redlock ${what}: ttl ${ttlMs}ms leaves no validity after the clock drift allowance (${this.drift(ttlMs)}ms)`,
      );
    }
  }

  /** Runs one script on one node; a script error rejects. */
  private async one(i: number, call: ScriptCall): Promise<unknown> {
    const [r] = await this.nodes[i]!.adapter.run([call]);
    if (r instanceof Error) throw r;
    return r;
  }

  /** Token-checked delete on one node; never rejects. */
  private releaseOn(i: number, key: string, token: string, publish: boolean): Promise<boolean> {
    const args = [token, channelOf(key), publish ? '1' : '0'];
    return this.one(i, { script: RELEASE, keys: [lockKey(key)], args }).then(
      (r) => r === 1,
      () => false,
    );
  }

  async acquire(key: string, request: AcquireRequest): Promise<Grant | null> {
    const { token, ttlMs } = request;
    this.check(token, ttlMs, 'acquire');
    if (request.value !== undefined) {
      throw new InvalidArgumentError('redlock acquire: this backend does not store holder values');
    }
    const n = this.nodes.length;
    const q = this.quorum;
    const drift = this.drift(ttlMs);
    const start = performance.now();
    const keys = [lockKey(key), fenceKey(key)];
    const r1 = await round(
      this.all,
      (i) => this.one(i, { script: ACQUIRE, keys, args: [token, ttlMs] }).then(parseCounter),
      Math.min(this.cfg.nodeTimeoutMs, ttlMs - drift),
      (outs): AcquireDecision | undefined => {
        const t = tally(outs, (c) => c !== null);
        if (t.yes >= q) return 'granted';
        if (t.no + t.failed > n - q) return t.failed > n - q ? 'quorum' : 'held';
        return undefined;
      },
      this.label,
      this.health,
    );
    const granted = this.all.filter((i) => {
      const o = r1.outcomes[i];
      return o?.ok === true && o.value !== null;
    });
    // A node that grants after the decision joins a grant that succeeded (it gets the fence, so
    // the lock keeps surviving node failures) and is given back when the attempt failed.
    let settle!: (fence: bigint | null) => void;
    const final = new Promise<bigint | null>((r) => (settle = r));
    r1.late.forEach((p, i) => {
      void p?.then(async (o) => {
        if (!o.ok || o.value === null) return;
        const f = await final;
        // Past its validity a late grant only blocks others (its PX counts from when it ran).
        if (f === null || performance.now() - start >= ttlMs - drift) {
          return void (await this.releaseOn(i, key, token, f === null));
        }
        const args = [token, f.toString()];
        await this.one(i, { script: WRITE_FENCE, keys, args }).catch(() => {});
      });
    });
    const causes = causesOf(r1.outcomes, n);

    if (r1.decision === 'granted') {
      let max = 0n;
      for (const i of granted) {
        const c = (r1.outcomes[i] as { value: bigint }).value;
        if (c > max) max = c;
      }
      const fence = max + 1n;
      const left = ttlMs - drift - (performance.now() - start);
      if (left > 0) {
        const r2 = await round(
          granted,
          (i) => this.one(i, { script: WRITE_FENCE, keys, args: [token, fence.toString()] }),
          Math.min(this.cfg.nodeTimeoutMs, left),
          (outs, pending) => {
            const t = tally(outs, (v) => v === 1);
            if (t.yes >= q) return true;
            if (t.yes + pending < q) return false;
            return undefined;
          },
          this.label,
          this.health,
        );
        if (r2.decision && performance.now() - start < ttlMs - drift) {
          settle(fence);
          return { fence };
        }
        r2.outcomes.forEach((o, i) => {
          if (o && !o.ok) causes[i] = o.error;
        });
      }
    }

    // Failed: give back every partial grant at once (bounded: a dead node must not hold us up).
    settle(null);
    await Promise.all(granted.map((i) => bounded(this.releaseOn(i, key, token, true), this.cfg.nodeTimeoutMs, false)));
    r1.outcomes.forEach((o, i) => {
      // A node that failed with an error may still have run the script: best effort, not awaited.
      if (o && !o.ok && !r1.late[i]) void this.releaseOn(i, key, token, true);
    });
    const failed = causes.filter((c) => c !== null).length;
    if (failed > n - q) {
      throw new QuorumError(
        `redlock: acquire "${key}": ${failed} of ${n} nodes failed, a majority (${q}) is out of reach`,
        causes,
      );
    }
    return null;
  }

  async extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    if (this.closed) throw new BackendError('redlock: backend is closed');
    if (!Array.isArray(items)) throw new InvalidArgumentError('redlock extend: items must be an array');
    if (items.length === 0) return [];
    for (const it of items) {
      if (typeof it?.key !== 'string' || it.key.length === 0) {
        throw new InvalidArgumentError('redlock extend: every item needs a non-empty key');
      }
      this.check(it.token, it.ttlMs, 'extend');
    }
    const n = this.nodes.length;
    const q = this.quorum;
    const start = performance.now();
    const validity = items.reduce((m, it) => Math.min(m, it.ttlMs - this.drift(it.ttlMs)), Infinity);
    const calls: ScriptCall[] = items.map((it) => ({
      script: EXTEND,
      keys: [lockKey(it.key)],
      args: [it.token, it.ttlMs],
    }));
    const yesOf = (outs: readonly (Outcome<unknown[]> | undefined)[]) =>
      items.map((_, j) => outs.filter((o) => o?.ok === true && o.value[j] === 1).length);
    const r = await round(
      this.all,
      async (i) => {
        const res = await this.nodes[i]!.adapter.run(calls);
        if (res.length !== calls.length) throw new BackendError('redlock: pipeline answered the wrong count');
        return res;
      },
      Math.min(this.cfg.nodeTimeoutMs, validity),
      (outs, pending) => (yesOf(outs).every((y) => y >= q || y + pending < q) ? true : undefined),
      this.label,
      this.health,
    );
    const elapsed = performance.now() - start;
    const causes = causesOf(r.outcomes, n);
    const failed = causes.filter((c) => c !== null).length;
    if (failed > n - q) {
      throw new QuorumError(
        `redlock: extend: ${failed} of ${n} nodes failed, a majority (${q}) is out of reach`,
        causes,
      );
    }
    const yes = yesOf(r.outcomes);
    return items.map((it, j) => yes[j]! >= q && it.ttlMs - elapsed - this.drift(it.ttlMs) > 0);
  }

  async release(key: string, token: string): Promise<boolean> {
    if (this.closed) throw new BackendError('redlock: backend is closed');
    if (typeof token !== 'string' || token.length === 0) {
      throw new InvalidArgumentError('redlock release: token must be a non-empty string');
    }
    const n = this.nodes.length;
    const q = this.quorum;
    const args = [token, channelOf(key), '1'];
    const r = await round(
      this.all,
      (i) => this.one(i, { script: RELEASE, keys: [lockKey(key)], args }),
      this.cfg.nodeTimeoutMs,
      (outs, pending) => {
        const t = tally(outs, (v) => v === 1);
        if (t.yes >= q) return true;
        if (t.yes + pending < q) return false;
        return undefined;
      },
      this.label,
      this.health,
    );
    if (r.decision) return true;
    const causes = causesOf(r.outcomes, n);
    const failed = causes.filter((c) => c !== null).length;
    if (failed > n - q) {
      throw new QuorumError(`redlock: release "${key}": ${failed} of ${n} nodes failed, outcome unknown`, causes);
    }
    return false;
  }

  async inspect(key: string): Promise<LockInfo | null> {
    if (this.closed) throw new BackendError('redlock: backend is closed');
    const n = this.nodes.length;
    const q = this.quorum;
    type Entry = { digest: string; pttl: number; fence: bigint } | null;
    const parse = (r: unknown): Entry => {
      if (!Array.isArray(r)) throw new BackendError(`redlock: unexpected inspect reply ${String(r)}`);
      if (r[0] !== 1) return null;
      return { digest: String(r[1]), pttl: Number(r[2]), fence: BigInt(String(r[3])) };
    };
    const holders = (outs: readonly (Outcome<Entry> | undefined)[]) => {
      const by = new Map<string, Entry[]>();
      for (const o of outs) {
        if (o?.ok && o.value) by.set(o.value.digest, [...(by.get(o.value.digest) ?? []), o.value]);
      }
      return [...by.values()].sort((a, b) => b.length - a.length)[0] ?? [];
    };
    const r = await round(
      this.all,
      (i) => this.one(i, { script: INSPECT, keys: [lockKey(key), fenceKey(key)], args: [] }).then(parse),
      this.cfg.nodeTimeoutMs,
      (outs, pending) => {
        const best = holders(outs).length;
        if (best >= q) return true;
        if (best + pending < q) return false;
        return undefined;
      },
      this.label,
      this.health,
    );
    if (!r.decision) {
      const causes = causesOf(r.outcomes, n);
      const failed = causes.filter((c) => c !== null).length;
      if (failed > n - q) {
        throw new QuorumError(`redlock: inspect "${key}": ${failed} of ${n} nodes failed`, causes);
      }
      return null;
    }
    const held = holders(r.outcomes);
    const fence = held.reduce((m, e) => (e!.fence > m ? e!.fence : m), 0n);
    // The lock stays held by a majority for at least the q-th longest remaining time.
    const remainingMs = held.map((e) => e!.pttl).sort((a, b) => b - a)[q - 1]!;
    return { key, fence, remainingMs };
  }

  /**
   * Is the key held (by anyone) on a majority? Resolves null when it is not (a waiter should try
   * now), else the ms until the first of those holds expires (Infinity if unknown).
   */
  private async heldFor(key: string): Promise<number | null> {
    const n = this.nodes.length;
    const q = this.quorum;
    const r = await round(
      this.all,
      (i) => this.one(i, { script: PTTL, keys: [lockKey(key)], args: [] }).then(Number),
      this.cfg.nodeTimeoutMs,
      (outs, pending) => {
        const t = tally(outs, (v) => v !== -2);
        if (t.yes >= q || (pending === 0 && t.no < n - q + 1)) return 'held';
        if (t.no >= n - q + 1) return 'free';
        return undefined;
      },
      this.label,
      this.health,
    );
    if (r.decision === 'free') return null;
    const left = r.outcomes.flatMap((o) => (o?.ok && o.value >= 0 ? [o.value] : []));
    return left.length > 0 ? Math.min(...left) : Infinity;
  }

  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (this.closed || signal.aborted) return Promise.resolve();
    const channel = channelOf(key);
    const n = this.nodes.length;
    return new Promise((resolve) => {
      let done = false;
      let poll: NodeJS.Timeout | undefined;
      const finish = () => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        clearTimeout(poll);
        signal.removeEventListener('abort', finish);
        this.waiters.delete(finish);
        for (const s of this.subs) s.remove(channel, finish);
        resolve();
      };
      const timer = setTimeout(finish, Math.max(0, maxMs));
      signal.addEventListener('abort', finish, { once: true });
      this.waiters.add(finish);
      const ready = this.subs.map((s) => bounded(s.add(channel, finish), this.cfg.nodeTimeoutMs, false));
      void Promise.all(ready).then(async (oks) => {
        if (done) return;
        // A holder holds on ≥ q nodes, so n − q + 1 subscriptions are sure to hear its release.
        if (oks.filter(Boolean).length < n - this.quorum + 1) {
          poll = setTimeout(finish, Math.min(Math.max(0, maxMs), this.cfg.pollMs));
          return;
        }
        // The release may have happened before we listened: look once now that we do. A holder
        // that crashed publishes nothing, so wake up when its hold expires at the latest.
        const left = await this.heldFor(key).catch(() => Infinity);
        if (left === null) finish();
        else if (left < maxMs) poll = setTimeout(finish, left + 2);
      });
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const w of [...this.waiters]) w();
    await Promise.all(this.subs.map((s) => s.close()));
  }
}
