/**
 * A waiter's wait for its turn (the lock recipe, mutex.ts): a watch on its predecessor's node
 * only — no herd — one per path, shared by the waits on it (ZooKeeper watches fire once).
 */
import type { ZkSession } from './client.js';
import { publish } from './events.js';
import { parseLockNode } from './paths.js';

/** What a wait reads of our nodes (mutex.ts's Mine). */
export interface Waiter {
  readonly key: string;
  readonly dir: string;
  /** Our node's name (its sequence orders our waiters on one key). */
  readonly name: string;
  readonly held: boolean;
  /** The node of the contender just ahead. */
  readonly pred: string | null;
  /** Wall-clock end of a window (of another holder) that blocks us, when the lowest node is ours. */
  readonly blockedUntil: number;
}

export class PredecessorWatches {
  /** Predecessor watches in place (one per path; ZooKeeper watches fire once). */
  private readonly armed = new Map<string, Set<() => void>>();

  constructor(
    private readonly zk: ZkSession,
    /** Our nodes by token (the mutex's). */
    private readonly nodes: ReadonlyMap<string, Waiter>,
  ) {}

  /** Drops every watch (the session that set them is gone). */
  forget(): void {
    const all = [...this.armed.values()];
    this.armed.clear();
    for (const set of all) for (const fn of set) fn();
  }

  /**
   * Resolves when the front waiter on `key` may be next: its predecessor is gone (a watch on that node
   * only — no herd), a blocking window ran out, or `maxMs`; at once on abort.
   */
  async wait(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted) return;
    // the front-most of our waiters on the key (several Locks may share this backend): the
    // predecessor of a later one may be our own node, which no release of the holder removes
    let m: Waiter | undefined;
    let front = Infinity;
    for (const x of this.nodes.values()) {
      if (x.key !== key || x.held) continue;
      const seq = parseLockNode(x.name)?.seq ?? Infinity;
      if (!m || seq < front) {
        m = x;
        front = seq;
      }
    }
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
}

/**
 * The one watcher function of each key directory, shared by every backend.watch() on it: the
 * client keeps a watcher per path and function until it fires (ZooKeeper cannot take one back),
 * so a function per watch() left one behind for each ended watch (observe()) until the next
 * change. A directory's entry is forgotten once it fires with nobody left on it.
 */
export class DirWatchers {
  private readonly dirs = new Map<string, { readonly subs: Set<() => void>; readonly fire: () => void }>();

  of(dir: string): { readonly subs: Set<() => void>; readonly fire: () => void } {
    let hub = this.dirs.get(dir);
    if (!hub) {
      const subs = new Set<() => void>();
      const fire = (): void => {
        if (subs.size === 0 && this.dirs.get(dir) === made) this.dirs.delete(dir);
        for (const fn of [...subs]) fn();
      };
      const made = { subs, fire };
      hub = made;
      this.dirs.set(dir, made);
    }
    return hub;
  }
}
