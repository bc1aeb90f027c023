/**
 * The lock recipe (Curator's InterProcessMutex): an EPHEMERAL_SEQUENTIAL node per contender
 * under the key's directory, named with the holder's protection id; the lowest sequence holds;
 * each waiter watches only its predecessor (getData with a watch, so a vanished predecessor
 * leaves no watch behind); a waiter that gives up deletes its node; release deletes the node,
 * retried until the session ends; an empty directory is removed (NotEmpty ignored). The fence
 * is the node's czxid: 64-bit, ensemble-wide, strictly increasing (the sequence restarts when
 * the directory is deleted and created again, the czxid never does).
 */
import type { LockInfo } from '../../backend.js';
import {
  CONNECTION_LOSS,
  NO_NODE,
  NODE_EXISTS,
  BAD_VERSION,
  PERSISTENT,
  SESSION_EXPIRED,
  publish,
  zkCode,
  type ZkSession,
} from './client.js';
import { decodeData, digestOf, encodeData, lockNodes, WINDOW, type Paths } from './paths.js';
import { ignore, missing, ProtectedCreates } from './protected.js';

/** One node of ours: a waiter's place, or a held lock. */
export interface Mine {
  readonly key: string;
  readonly token: string;
  readonly digest: string;
  readonly dir: string;
  readonly path: string;
  readonly name: string;
  /** The session that created it (hex). */
  readonly session: string;
  held: boolean;
  fence: bigint;
  ttlMs: number;
  /** The node of the contender just ahead (waiters). */
  pred: string | null;
  /** Wall-clock end of a window (of another holder) that blocks us, when the lowest node is ours. */
  blockedUntil: number;
  /** We stored a window (an extension to another TTL). */
  windowed: boolean;
  /** A waiter's place runs out if no attempt renews it (AcquireRequest.queue). */
  expiry: NodeJS.Timeout | null;
}

export interface Window {
  digest: string;
  fence: bigint;
  end: number;
  version: number;
}

/** How long an emptied key directory stays before it is removed. */
const LINGER_MS = 1000;

export class Mutex {
  /** Our nodes by token. */
  readonly nodes = new Map<string, Mine>();
  /** Key directories to remove once they stayed empty for LINGER_MS. */
  private readonly cleanups = new Map<string, NodeJS.Timeout>();
  /** Our creates, found again after a lost reply (protection ids). */
  private readonly creates: ProtectedCreates;
  /** Predecessor watches in place (one per path; ZooKeeper watches fire once). */
  private readonly armed = new Map<string, Set<() => void>>();
  /** Timers that delete kept windows at their end while this process runs (keep). */
  private readonly windowEnds = new Set<NodeJS.Timeout>();

  constructor(
    private readonly zk: ZkSession,
    private readonly paths: Paths,
  ) {
    this.creates = new ProtectedCreates(zk);
  }

  /** Drops every watch (the session that set them is gone). */
  forgetWatches(): void {
    const all = [...this.armed.values()];
    this.armed.clear();
    for (const set of all) for (const fn of set) fn();
  }

  async readWindow(dir: string): Promise<Window | null> {
    try {
      const { data, stat } = await this.zk.getData(`${dir}/${WINDOW}`);
      const d = decodeData(data);
      if (!d || typeof d.ms !== 'number') return null;
      return { digest: d.d, fence: BigInt(d.f ?? '0'), end: stat.mtime + d.ms, version: stat.version };
    } catch (e) {
      if (missing(e)) return null;
      throw e;
    }
  }

  /** A window that has run out is removed (versioned: a fresh one written meanwhile stays). */
  private dropWindow(dir: string, w: Window): void {
    this.zk.remove(`${dir}/${WINDOW}`, w.version).catch(() => {});
  }

  /** Deletes the nodes of creates whose outcome was never learned (see ProtectedCreates.sweep). */
  sweep(): Promise<void> {
    return this.creates.sweep((digest) => [...this.nodes.values()].find((m) => m.digest === digest)?.name);
  }

  get hasSuspects(): boolean {
    return this.creates.hasSuspects;
  }

  /**
   * One attempt. A waiter keeps its node between attempts (its place in line); without `queue`
   * the attempt never leaves a node behind.
   */
  async acquire(
    key: string,
    token: string,
    ttlMs: number,
    queue: boolean,
    value: string | undefined,
  ): Promise<bigint | null> {
    const dir = this.paths.dir(key);
    let mine = this.nodes.get(token);
    if (mine && (mine.key !== key || mine.session !== this.zk.session)) {
      this.forget(mine);
      mine = undefined;
    }
    if (!mine && !queue) {
      // tryAcquire: a held key costs one read and no write
      const seen = await this.zk.getChildren(dir).catch((e: unknown) => {
        if (missing(e)) return null;
        throw e;
      });
      if (seen && lockNodes(seen.children).length > 0) return null;
      if (seen?.children.includes(WINDOW)) {
        const w = await this.readWindow(dir);
        if (w && w.end > Date.now() && w.digest !== digestOf(token)) return null;
      }
    }
    if (!mine) {
      const digest = digestOf(token);
      // an earlier attempt of this token that lost its create's reply left a node ours to reuse
      const path = await this.creates.node(dir, digest, value);
      const session = this.zk.session; // a reply comes on the session that made the node
      const name = path.slice(dir.length + 1);
      mine = {
        key,
        token,
        digest,
        dir,
        path,
        name,
        session,
        held: false,
        fence: 0n,
        ttlMs,
        pred: null,
        blockedUntil: 0,
        windowed: false,
        expiry: null,
      };
      this.nodes.set(token, mine);
    }
    const m = mine;
    if (m.expiry) clearTimeout(m.expiry);
    m.expiry = null;
    let children: string[];
    let fence: bigint;
    try {
      // pipelined: one round trip
      const [list, stat] = await Promise.all([this.zk.getChildren(dir), this.zk.exists(m.path)]);
      if (!stat) throw Object.assign(new Error('our node is gone'), { code: NO_NODE });
      children = list.children;
      fence = stat.czxid;
    } catch (e) {
      if (!missing(e)) {
        if (!queue) await this.drop(m).catch(() => false);
        else this.expire(m, token, ttlMs); // unless an attempt comes back for it
        throw e;
      }
      // our node was removed (forceRelease, an expired place): the next attempt starts again
      this.forget(m);
      return null;
    }
    const line = lockNodes(children);
    const at = line.findIndex((n) => n.name === m.name);
    if (at < 0) {
      this.forget(m);
      return null;
    }
    m.pred = at > 0 ? line[at - 1]!.name : null;
    m.blockedUntil = 0;
    if (at === 0 && children.includes(WINDOW)) {
      const w = await this.readWindow(dir);
      if (w && w.digest !== m.digest) {
        if (w.end > Date.now()) m.blockedUntil = w.end;
        else this.dropWindow(dir, w);
      }
    }
    if (at === 0 && m.blockedUntil === 0) {
      m.held = true;
      m.fence = fence;
      m.ttlMs = ttlMs;
      return fence;
    }
    if (!queue) {
      await this.drop(m);
      return null;
    }
    this.expire(m, token, ttlMs);
    return null;
  }

  /** A waiter's place lasts one TTL past its last attempt (the engine retries well within it). */
  private expire(m: Mine, token: string, ttlMs: number): void {
    if (m.expiry) clearTimeout(m.expiry);
    m.expiry = setTimeout(() => {
      if (!m.held && this.nodes.get(token) === m) void this.drop(m).catch(() => {});
    }, ttlMs + 1000);
    m.expiry.unref();
  }

  private forget(m: Mine): void {
    if (m.expiry) clearTimeout(m.expiry);
    m.expiry = null;
    if (this.nodes.get(m.token) === m) this.nodes.delete(m.token);
  }

  /** Deletes our node (retried across reconnects until the session ends), then an empty directory. */
  async drop(m: Mine): Promise<boolean> {
    this.forget(m);
    const ops: Promise<unknown>[] = [];
    let gone = false;
    const removal = this.removeSurely(m.path, m.session).then(
      (ok) => (gone = ok),
      () => false,
    );
    ops.push(removal);
    if (m.windowed) ops.push(this.removeOurWindow(m).catch(() => {}));
    await Promise.all(ops);
    this.cleanLater(m.dir);
    return gone;
  }

  /**
   * An empty key directory is removed after a short linger (a hot key is not re-created on every
   * acquire); versioned, and NotEmpty (waiters, a window) or a missing directory is fine.
   */
  private cleanLater(dir: string): void {
    if (this.cleanups.has(dir)) return;
    const t = setTimeout(() => this.cleanNow(dir), LINGER_MS);
    t.unref();
    this.cleanups.set(dir, t);
  }

  private cleanNow(dir: string): Promise<void> {
    const t = this.cleanups.get(dir);
    if (t) clearTimeout(t);
    this.cleanups.delete(dir);
    for (const m of this.nodes.values()) if (m.dir === dir) return Promise.resolve();
    return this.zk.remove(dir, 0).catch(() => {});
  }

  /** Removes the directories still lingering (close()). */
  async flushCleanups(): Promise<void> {
    await Promise.all([...this.cleanups.keys()].map((d) => this.cleanNow(d)));
  }

  /** Stops deleting kept windows at their end (close()): they stay, honoured by their stored end. */
  stopWindowTimers(): void {
    for (const t of this.windowEnds) clearTimeout(t);
    this.windowEnds.clear();
  }

  private async removeOurWindow(m: Mine): Promise<void> {
    const w = await this.readWindow(m.dir);
    if (w && w.digest === m.digest)
      await this.zk.remove(`${m.dir}/${WINDOW}`, w.version).catch(ignore(NO_NODE, BAD_VERSION));
  }

  /** True if it deleted the node; false if the node was already gone (or its session ended). */
  private async removeSurely(path: string, session: string): Promise<boolean> {
    for (;;) {
      try {
        await this.zk.remove(path);
        return true;
      } catch (e) {
        const code = zkCode(e);
        if (code === NO_NODE || code === SESSION_EXPIRED) return false;
        if (code !== CONNECTION_LOSS) throw e;
        if (this.zk.session !== session && this.zk.session !== '') return false; // a new session: ours is gone
        await this.zk.whenConnected(); // rejects once the session is lost for good or closed
        if (this.zk.session !== session) return false;
      }
    }
  }

  /** Token-checked release. */
  async release(key: string, token: string): Promise<boolean> {
    const m = this.nodes.get(token);
    if (!m || m.key !== key || !m.held) return false;
    m.held = false;
    return this.drop(m);
  }

  /** A waiter gives up its place. */
  async leave(key: string, token: string): Promise<void> {
    const m = this.nodes.get(token);
    if (!m || m.key !== key || m.held) return;
    await this.drop(m);
  }

  /**
   * Liveness of a held lock: our node still exists (a forced release or an ended session
   * removes it). An extension to another TTL stores the new end in the key's window node, so
   * the lock outlives this process (runExclusive's lockAtLeastFor).
   */
  async extend(key: string, token: string, ttlMs: number): Promise<boolean> {
    const m = this.nodes.get(token);
    if (!m || m.key !== key || !m.held || m.session !== this.zk.session) return false;
    if (ttlMs === m.ttlMs) {
      const stat = await this.zk.exists(m.path);
      if (!stat) m.held = false;
      return !!stat;
    }
    if (!(await this.writeWindow(m, ttlMs))) return false;
    m.ttlMs = ttlMs;
    return true;
  }

  /**
   * Stores a window of `ms` from now (the server's mtime) in the key's window node, in one multi
   * with a check of our node: false (and the lease not held) when our node is gone.
   */
  private async writeWindow(m: Mine, ms: number): Promise<boolean> {
    const data = encodeData({ d: m.digest, f: m.fence.toString(), ms });
    const window = `${m.dir}/${WINDOW}`;
    m.windowed = true; // a release after a failed write removes a window whose reply was lost
    try {
      await this.zk.multi([
        { op: 'check', path: m.path },
        { op: 'create', path: window, data, mode: PERSISTENT },
      ]);
    } catch (e) {
      if (zkCode(e) !== NODE_EXISTS) return this.lostOn(m, e);
      try {
        await this.zk.multi([
          { op: 'check', path: m.path },
          { op: 'setData', path: window, data, version: -1 },
        ]);
      } catch (e2) {
        return this.lostOn(m, e2);
      }
    }
    return true;
  }

  /**
   * runExclusive's lockAtLeastFor: the lock becomes the key's window for `ms` more, and our node
   * goes. The window node (persistent, its end the server's mtime + ms) is honoured by every
   * acquirer, also after this process and its session are gone; while this process runs, it
   * deletes the window at its end (the timer starts after the write committed, so never early).
   * The ephemeral node cannot stay: it would hold the lock for as long as the session lives.
   */
  async keep(key: string, token: string, ms: number): Promise<boolean> {
    const m = this.nodes.get(token);
    if (!m || m.key !== key || !m.held || m.session !== this.zk.session) return false;
    if (!(await this.writeWindow(m, ms))) return false;
    m.held = false;
    m.windowed = false; // drop() leaves the window in place
    await this.drop(m);
    const t = setTimeout(() => {
      this.windowEnds.delete(t);
      void this.removeOurWindow(m)
        .then(() => this.cleanLater(m.dir))
        .catch(() => {}); // left for the next acquirer, which deletes an expired window
    }, ms);
    t.unref();
    this.windowEnds.add(t);
    return true;
  }

  private lostOn(m: Mine, e: unknown): boolean {
    if (zkCode(e) !== NO_NODE) throw e;
    m.held = false;
    return false;
  }

  /**
   * Resolves when the waiter on `key` may be next: its predecessor is gone (a watch on that node
   * only — no herd), a blocking window ran out, or `maxMs`; at once on abort.
   */
  async waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted) return;
    let m: Mine | undefined;
    for (const x of this.nodes.values()) if (x.key === key && !x.held) m = x;
    let bound = maxMs;
    if (m?.blockedUntil) bound = Math.min(maxMs, Math.max(1, m.blockedUntil - Date.now() + 1));
    await new Promise<void>((resolve) => {
      let timer: NodeJS.Timeout | null = null;
      let set: Set<() => void> | undefined;
      const done = () => {
        if (timer) clearTimeout(timer);
        signal.removeEventListener('abort', done);
        set?.delete(done);
        resolve();
      };
      timer = setTimeout(done, bound);
      signal.addEventListener('abort', done, { once: true });
      if (!m?.pred || m.blockedUntil) return;
      const path = `${m.dir}/${m.pred}`;
      set = this.armed.get(path);
      if (set) {
        set.add(done); // a watch on this node is already in place
        return;
      }
      const fresh = new Set<() => void>([done]);
      set = fresh;
      this.armed.set(path, fresh);
      const fire = () => {
        if (this.armed.get(path) === fresh) this.armed.delete(path);
        for (const fn of [...fresh]) fn();
      };
      this.zk
        .getData(path, () => {
          publish({ backend: 'zookeeper', type: 'watch', watch: 'predecessor', key });
          fire();
        })
        .catch(() => fire()); // gone already (no watch left behind), or an error the next attempt meets
    });
  }

  /** What holds `key`: the lowest node (value, czxid), else a live window. */
  async inspect(key: string): Promise<LockInfo | null> {
    const dir = this.paths.dir(key);
    let children: string[];
    try {
      children = (await this.zk.getChildren(dir)).children;
    } catch (e) {
      if (missing(e)) return null;
      throw e;
    }
    for (const n of lockNodes(children)) {
      try {
        const { data, stat } = await this.zk.getData(`${dir}/${n.name}`);
        const d = decodeData(data);
        const info: LockInfo = { key, fence: stat.czxid, remainingMs: -1 };
        return d?.v === undefined ? info : { ...info, value: d.v };
      } catch (e) {
        if (!missing(e)) throw e; // released meanwhile: the next one holds
      }
    }
    if (children.includes(WINDOW)) {
      const w = await this.readWindow(dir);
      const left = w ? w.end - Date.now() : 0;
      if (w && left > 0) return { key, fence: w.fence, remainingMs: Math.ceil(left) };
    }
    return null;
  }

  /** Administrative break: deletes the holder's node and any window. */
  async forceRelease(key: string): Promise<LockInfo | null> {
    const info = await this.inspect(key);
    if (!info) return null;
    const dir = this.paths.dir(key);
    const { children } = await this.zk.getChildren(dir);
    const head = lockNodes(children)[0];
    const ops: Promise<unknown>[] = [];
    if (head) ops.push(this.zk.remove(`${dir}/${head.name}`).catch(ignore(NO_NODE)));
    if (children.includes(WINDOW)) ops.push(this.zk.remove(`${dir}/${WINDOW}`).catch(ignore(NO_NODE)));
    await Promise.all(ops);
    return info;
  }
}
