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
import type { ZkSession } from './client.js';
import { forceReleaseLock, inspectLock } from './inspect.js';
import { digestOf, encodeData, lockNodes, WINDOW, type Paths } from './paths.js';
import { missing, ProtectedCreates } from './protected.js';
import { CONNECTION_LOSS, NO_NODE, NODE_EXISTS, PERSISTENT, SESSION_EXPIRED, zkCode } from './protocol.js';
import { PredecessorWatches } from './watches.js';
import { dropWindow, readWindow, removeOurWindow } from './window.js';

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

/** How long an emptied key directory stays before it is removed. */
const LINGER_MS = 1000;

export class Mutex {
  /** Our nodes by token. */
  readonly nodes = new Map<string, Mine>();
  /** Key directories to remove once they stayed empty for LINGER_MS. */
  private readonly cleanups = new Map<string, NodeJS.Timeout>();
  /** Our creates, found again after a lost reply (protection ids). */
  private readonly creates: ProtectedCreates;
  /** Predecessor watches in place (waitForChange). */
  private readonly watches: PredecessorWatches;
  /** Timers that delete kept windows at their end while this process runs (keep). */
  private readonly windowEnds = new Set<NodeJS.Timeout>();

  constructor(
    private readonly zk: ZkSession,
    private readonly paths: Paths,
  ) {
    this.creates = new ProtectedCreates(zk);
    this.watches = new PredecessorWatches(zk, this.nodes);
  }

  /** Drops every watch (the session that set them is gone). */
  forgetWatches(): void {
    this.watches.forget();
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
        const w = await readWindow(this.zk, dir);
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
      const w = await readWindow(this.zk, dir);
      if (w && w.digest !== m.digest) {
        if (w.end > Date.now()) m.blockedUntil = w.end;
        else dropWindow(this.zk, dir, w);
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
    if (m.windowed) ops.push(removeOurWindow(this.zk, m.dir, m.digest).catch(() => {}));
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

  /**
   * True if it deleted the node; false if the node was already gone (or its session ended). A
   * retry that finds the node gone on the same session, after an attempt whose reply was lost,
   * counts as deleted: that attempt went through (the node is ephemeral, sequential and ours,
   * so no other holder ever had it; only an administrative delete in that very gap could also
   * have removed it, and the lock was being given up anyway).
   */
  private async removeSurely(path: string, session: string): Promise<boolean> {
    for (let unknown = false; ; unknown = true) {
      try {
        await this.zk.remove(path);
        return true;
      } catch (e) {
        const code = zkCode(e);
        if (code === NO_NODE) return unknown && this.zk.session === session;
        if (code === SESSION_EXPIRED) return false;
        if (code !== CONNECTION_LOSS) throw e;
        if (this.zk.session !== session && this.zk.session !== '') return false; // a new session: ours is gone
        if (this.zk.ending) return false; // our close() ends the session: the server deletes the node with it
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
   * the lock outlives this process (runExclusive's lockAtLeastFor); once a window is stored,
   * every renewal stores the new end again: a TTL longer than the session timeout is kept only
   * by the window (the server expires a cut-off holder's session, and its node, sooner).
   */
  async extend(key: string, token: string, ttlMs: number): Promise<boolean> {
    const m = this.nodes.get(token);
    if (!m || m.key !== key || !m.held || m.session !== this.zk.session) return false;
    if (ttlMs === m.ttlMs && !m.windowed) {
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
      void removeOurWindow(this.zk, m.dir, m.digest)
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

  /** Resolves when the waiter on `key` may be next (see PredecessorWatches.wait). */
  waitForChange(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    return this.watches.wait(key, signal, maxMs);
  }

  /** What holds `key`: the lowest node (value, czxid), else a live window (inspect.ts). */
  inspect(key: string): Promise<LockInfo | null> {
    return inspectLock(this.zk, this.paths, key);
  }

  /** Administrative break: deletes the holder's node and any window (inspect.ts). */
  forceRelease(key: string): Promise<LockInfo | null> {
    return forceReleaseLock(this.zk, this.paths, key);
  }
}
