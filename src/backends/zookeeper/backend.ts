/**
 * The ZooKeeper driver: the mutex recipe (mutex.ts) on one session (client.ts), plus what the
 * contract offers beside it — holder values, a result store, watch, list, inspect, forceRelease
 * — and the session's loss reported to the engine (`onLost`).
 */
import { inspect } from 'node:util';
import type { AcquireRequest, Backend, ExtendItem, Grant, LockInfo, LostCallback, ResultStore } from '../../backend.js';
import { BackendError, ClosedError, InvalidArgumentError } from '../../errors.js';
import type { ZkSession } from './client.js';
import { publish, type SessionState } from './events.js';
import { Mutex, type Mine } from './mutex.js';
import { DirWatchers } from './watches.js';
import { decodeKey, Paths } from './paths.js';
import { NO_NODE, NODE_EXISTS, PERSISTENT, zkCode } from './protocol.js';

export interface ZookeeperConfig {
  readonly session: ZkSession;
  /** The backend made the client (fromUrl) and closes it. */
  readonly owned: boolean;
  readonly root: string;
  /** SUSPENDED (connection lost, session maybe alive) counts as lost. */
  readonly suspendedIsLost: boolean;
}

/** The most bytes of a lock node's data (a holder value in its record): under jute.maxbuffer's 1 MB default. */
const MAX_NODE_DATA = 1_000_000;

/** The longest close() waits for the deletion of waiters' nodes (at most the session timeout). */
const CLOSE_BOUND_MS = 5000;

/** Resolves when `p` settles, after `ms`, or when `cut` resolves, whichever is first. */
async function within(p: Promise<unknown>, ms: number, cut: Promise<void> | null): Promise<void> {
  let t: NodeJS.Timeout | undefined;
  const timer = new Promise<void>((resolve) => {
    t = setTimeout(resolve, ms);
    t.unref();
  });
  try {
    await Promise.race([p.then(noop, noop), timer, ...(cut ? [cut] : [])]);
  } finally {
    clearTimeout(t);
  }
}
const noop = (): void => {};

interface ResultRecord {
  r: string;
  ms: number;
}

export class ZookeeperBackend implements Backend {
  readonly name = 'zookeeper';
  readonly capabilities = { push: true, fair: true, value: true, results: true, session: true } as const;
  readonly results: ResultStore = {
    get: (lockKey) => this.getResult(lockKey),
    put: (lockKey, token, value, ttlMs) => this.putResult(lockKey, token, value, ttlMs),
  };
  private readonly zk: ZkSession;
  private readonly paths: Paths;
  private readonly mutex: Mutex;
  private readonly lost = new Set<LostCallback>();
  /** Nodes of leases reported lost while the session may still live: deleted once it is back. */
  private condemned: Mine[] = [];
  private resultsDir: Promise<void> | null = null;
  /** Children watches of key directories (watch()): one watcher function per directory. */
  private readonly hubs = new DirWatchers();
  private closed = false;
  /** Removes the nodes of creates whose reply was lost (mutex.sweep), while there are any. */
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly config: ZookeeperConfig) {
    this.zk = config.session;
    this.paths = new Paths(config.root);
    this.mutex = new Mutex(this.zk, this.paths);
    this.zk.onState((state, session) => this.onState(state, session));
    this.sweeper = setInterval(() => this.sweep(), 1000);
    this.sweeper.unref();
  }

  private sweep(): void {
    if (!this.closed && this.mutex.hasSuspects && this.zk.usable) void this.mutex.sweep().catch(() => {});
  }

  private onState(state: SessionState, session: string): void {
    if (state === 'LOST') {
      this.mutex.forgetWatches();
      this.loseAll((m) => m.session === session || m.session !== this.zk.session, 'the ZooKeeper session was lost');
    } else if (state === 'SUSPENDED' && this.config.suspendedIsLost) {
      this.loseAll((m) => m.session === session, 'the ZooKeeper connection was suspended (suspendedIsLost)');
    } else if (state === 'RECONNECTED') {
      this.sweep();
      // the same session came back: what we reported lost meanwhile is deleted now
      const doomed = this.condemned.filter((m) => m.session === session);
      this.condemned = [];
      for (const m of doomed) void this.mutex.drop(m).catch(() => {});
    } else if (state === 'CONNECTED') {
      this.condemned = [];
    }
  }

  private loseAll(which: (m: Mine) => boolean, reason: string): void {
    const cause = new BackendError(`zookeeper: ${reason}`);
    for (const m of [...this.mutex.nodes.values()]) {
      if (!which(m)) continue;
      this.mutex.nodes.delete(m.token);
      if (m.expiry) clearTimeout(m.expiry);
      this.condemned.push(m);
      if (!m.held) continue;
      m.held = false;
      for (const cb of [...this.lost]) cb(m.key, m.token, cause);
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new ClosedError('zookeeper: backend closed');
  }

  /**
   * A holder value goes in the lock node's data, and ZooKeeper answers a request over its
   * jute.maxbuffer (1 MB by default) by closing the connection: a value that cannot fit is
   * refused before any I/O. Counted as stored (JSON: a control character takes six bytes).
   */
  checkValue(value: string, what: string): void {
    const bytes = Buffer.byteLength(JSON.stringify(value), 'utf8') + 40; // the record around it
    if (bytes > MAX_NODE_DATA) {
      throw new InvalidArgumentError(
        `${what} takes ${bytes} bytes in a ZooKeeper node; at most ${MAX_NODE_DATA} fit (ZooKeeper's jute.maxbuffer is 1 MB by default)`,
      );
    }
  }

  async acquire(key: string, req: AcquireRequest): Promise<Grant | null> {
    if (req.value !== undefined) this.checkValue(req.value, 'acquire: value');
    this.assertOpen();
    // until a session connected, the client reports the timeout it asked for, and the server may
    // agree to a shorter one (maxSessionTimeout): wait for it (the engine bounds the call)
    if (!this.zk.timeoutAgreed) await this.zk.whenConnected();
    this.assertOpen();
    this.checkTtl(req.ttlMs);
    const fence = await this.mutex.acquire(key, req.token, req.ttlMs, req.queue === true, req.value);
    if (fence === null) return null;
    if (this.closed) {
      await this.mutex.release(key, req.token).catch(() => false);
      throw new ClosedError('zookeeper: backend closed');
    }
    try {
      // the grant's session may be a new one (an expired session replaced meanwhile): its timeout
      this.checkTtl(req.ttlMs);
    } catch (e) {
      await this.mutex.release(key, req.token).catch(() => false);
      throw e;
    }
    return { fence };
  }

  /**
   * The server may expire the session (and grant the lock to another) before a longer lease runs
   * out on the holder's clock: a lease never claims more than its session guarantees.
   */
  private checkTtl(ttlMs: number): void {
    const session = this.zk.sessionTimeoutMs;
    if (ttlMs > session) {
      throw new InvalidArgumentError(
        `zookeeper: ttl ${ttlMs}ms exceeds the session timeout (${session}ms${this.zk.timeoutAgreed ? ', as the server agreed to it' : ''}); use a ttl of at most the session timeout, or a longer sessionTimeout (the server caps it at its maxSessionTimeout)`,
      );
    }
  }

  extend(items: readonly ExtendItem[]): Promise<boolean[]> {
    // every probe in the same tick: pipelined on the one connection
    return Promise.all(items.map((i) => this.mutex.extend(i.key, i.token, i.ttlMs)));
  }

  async release(key: string, token: string): Promise<boolean> {
    // close() ended our session (own client) or stopped tracking our nodes: not "found gone"
    this.assertOpen();
    return this.mutex.release(key, token);
  }

  /** runExclusive's lockAtLeastFor: a stored window that outlives the process; our node goes (mutex.keep). */
  async keep(key: string, token: string, ms: number): Promise<boolean> {
    this.assertOpen();
    return this.mutex.keep(key, token, ms);
  }

  leave(key: string, token: string): Promise<void> {
    return this.mutex.leave(key, token);
  }

  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return this.mutex.waitForChange(key, signal, maxMs);
  }

  inspect(key: string): Promise<LockInfo | null> {
    this.assertOpen();
    return this.mutex.inspect(key);
  }

  forceRelease(key: string): Promise<LockInfo | null> {
    this.assertOpen();
    return this.mutex.forceRelease(key);
  }

  async *list(prefix: string): AsyncIterable<LockInfo> {
    this.assertOpen();
    let names: string[];
    try {
      names = (await this.zk.getChildren(this.paths.locks)).children;
    } catch (e) {
      if (zkCode(e) === NO_NODE) return;
      throw e;
    }
    for (const name of names.sort()) {
      const key = decodeKey(name);
      if (key === null || !key.startsWith(prefix)) continue;
      const info = await this.mutex.inspect(key);
      if (info) yield info;
    }
  }

  /**
   * Calls `onChange` on every change of the key's contenders (a children watch, re-armed). A
   * watch dies with its session and the client tells no one: when a new session replaces an
   * expired one (our own client), the watch is set again on it, and `onChange` is called at the
   * loss and at the new session (what was held may have changed meanwhile).
   */
  async watch(key: string, onChange: () => void): Promise<() => void> {
    this.assertOpen();
    const dir = this.paths.dir(key);
    const hub = this.hubs.of(dir);
    let live = true;
    /** The latest arm: a retry of an earlier one does nothing. */
    let gen = 0;
    const fired = () => {
      if (!live) return;
      publish({ backend: 'zookeeper', type: 'watch', watch: 'children', key });
      onChange();
      rearm(0);
    };
    hub.subs.add(fired);
    const arm = async (): Promise<void> => {
      ++gen;
      try {
        await this.zk.getChildren(dir, hub.fire);
      } catch (e) {
        if (zkCode(e) !== NO_NODE) throw e;
        // no directory yet: an existence watch fires when it is created
        const stat = await this.zk.exists(dir, hub.fire);
        // created between the two calls: its children are watched now (the watch exists set on
        // it fires only when it is deleted, which also covers a failure here)
        if (stat) await this.zk.getChildren(dir, hub.fire).catch(() => {});
      }
    };
    // a failed arm is tried again (backing off) while the session lasts; a new session re-arms
    const rearm = (failures: number): void => {
      const mine = gen + 1;
      arm().catch(() => {
        if (!live || mine !== gen || this.closed || !this.zk.usable) return;
        setTimeout(() => live && mine === gen && rearm(failures + 1), Math.min(1000, 100 * 2 ** failures)).unref();
      });
    };
    const off = this.zk.onState((state) => {
      if (!live) return;
      if (state === 'LOST') onChange();
      else if (state === 'CONNECTED') {
        onChange();
        rearm(0);
      }
    });
    try {
      await arm();
    } catch (e) {
      live = false;
      hub.subs.delete(fired);
      off();
      throw e;
    }
    return () => {
      live = false;
      hub.subs.delete(fired);
      off();
    };
  }

  private ensureResultsDir(): Promise<void> {
    this.resultsDir ??= this.zk.mkdirp(this.paths.results).catch((e: unknown) => {
      this.resultsDir = null;
      throw e;
    });
    return this.resultsDir;
  }

  private async getResult(lockKey: string): Promise<string | null> {
    const path = this.paths.result(lockKey);
    try {
      const { data, stat } = await this.zk.getData(path);
      const rec = JSON.parse(data?.toString('utf8') ?? 'null') as ResultRecord | null;
      if (rec && typeof rec.r === 'string' && stat.mtime + rec.ms > Date.now()) return rec.r;
      await this.zk.remove(path, stat.version).catch(() => {}); // expired: removed, versioned
      return null;
    } catch (e) {
      if (zkCode(e) === NO_NODE) return null;
      throw e;
    }
  }

  private async putResult(lockKey: string, token: string, value: string, ttlMs: number): Promise<boolean> {
    const m = this.mutex.nodes.get(token);
    if (!m || m.key !== lockKey || !m.held) return false;
    await this.ensureResultsDir();
    const path = this.paths.result(lockKey);
    const data = Buffer.from(JSON.stringify({ r: value, ms: ttlMs } satisfies ResultRecord), 'utf8');
    try {
      // stored only while our node still holds the lock
      await this.zk.multi([
        { op: 'check', path: m.path },
        { op: 'create', path, data, mode: PERSISTENT },
      ]);
      return true;
    } catch (e) {
      if (zkCode(e) !== NODE_EXISTS) {
        if (zkCode(e) === NO_NODE) return false;
        throw e;
      }
    }
    try {
      await this.zk.multi([
        { op: 'check', path: m.path },
        { op: 'setData', path, data, version: -1 },
      ]);
      return true;
    } catch (e) {
      if (zkCode(e) === NO_NODE) return false;
      throw e;
    }
  }

  onLost(cb: LostCallback): void {
    this.lost.add(cb);
  }

  /** The current ZooKeeper session id (hex; '' before the first connection). */
  get sessionId(): string {
    return this.zk.session;
  }

  /** The session state (Curator's names): CONNECTED, SUSPENDED, RECONNECTED, LOST. */
  get sessionState(): SessionState | null {
    return this.zk.state;
  }

  /**
   * The engine's close begins (releases follow): on our own client, a server out of reach is no
   * longer waited for (client.ts, beginClose); the session ends with close(), its nodes with it.
   */
  closing(): void {
    if (!this.closed) this.zk.beginClose();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.sweeper);
    this.zk.beginClose();
    try {
      // Waiters' places go now; held locks were released by the engine (detached ones stay).
      // Bounded: with no server to reach, a deletion waits for a reconnect. Our own client's
      // session ends with close() (the server deletes its nodes with it): no wait once it is cut
      // off; a caller's client goes on deleting them once it reconnects.
      const waiting = [...this.mutex.nodes.values()].filter((m) => !m.held);
      const bound = Math.min(this.zk.sessionTimeoutMs, CLOSE_BOUND_MS);
      const cut = this.config.owned ? this.zk.untilDisconnected() : null;
      await within(Promise.allSettled(waiting.map((m) => this.mutex.drop(m))), bound, cut);
      this.mutex.stopWindowTimers(); // kept windows stay, honoured by their stored end
      if (this.zk.isConnected) await within(this.mutex.flushCleanups(), bound, cut);
      this.mutex.forgetWatches();
    } finally {
      await this.zk.close(this.config.owned);
      this.lost.clear();
    }
  }

  [inspect.custom](): string {
    return `ZookeeperBackend { root: '${this.config.root}', session: ${this.zk.state ?? 'CONNECTING'}${this.closed ? ', closed' : ''} }`;
  }
  toJSON(): { name: string; root: string } {
    return { name: this.name, root: this.config.root };
  }
}
