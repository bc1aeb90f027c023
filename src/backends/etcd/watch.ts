/**
 * The etcd driver's watches: a waiter's watch on the entry just ahead of its own (one waiter woken
 * per release), observers' watches on a lock's entries, and an idle anchor watch that keeps
 * etcd3's watch stream open between waits (etcd3 ends the stream when its last watcher goes; the
 * next wait would open a new one, after a cancellation error that also resets the connection).
 */
import type { Namespace, Watcher } from 'etcd3';
import { entriesOf } from './keys.js';

/** The entry a refused attempt saw just ahead of its own, and the revision it saw it at. */
export interface Pred {
  readonly etcdKey: string;
  readonly rev: string;
}

/** The key of the anchor watch (never written; outside every lock's and result's key). */
const ANCHOR = '\u0000leasehold/anchor';

export class Watches {
  private readonly watchers = new Set<Watcher>();
  private anchor: Watcher | null = null;
  private closed = false;

  constructor(private readonly client: Namespace) {}

  /** Resolves when our predecessor's entry is deleted (from the revision we saw it at), or after maxMs. */
  async waitFor(pred: Pred | undefined, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted || this.closed) return;
    let watcher: Watcher | null = null;
    let done!: () => void;
    const finished = new Promise<void>((r) => (done = r));
    const timer = setTimeout(done, maxMs);
    const onAbort = () => done();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      if (!pred) return await finished;
      this.anchor ??= this.client.watch().key(ANCHOR).watcher();
      watcher = this.client
        .watch()
        .key(pred.etcdKey)
        .startRevision(String(BigInt(pred.rev) + 1n))
        .only('delete')
        .watcher();
      this.watchers.add(watcher);
      watcher.on('delete', () => done());
      watcher.on('error', () => done());
      await finished;
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      if (watcher) {
        this.watchers.delete(watcher);
        void watcher.cancel().catch(() => {});
      }
    }
  }

  /**
   * Calls `onChange` on every change of the lock's entries. etcd3 re-creates a watch after a
   * reconnect from the last revision it saw; when that revision was compacted meanwhile, etcd
   * cancels the watch and etcd3 drops it ('error'): a new watch from now takes its place (the
   * call to `onChange` makes the caller look again, covering what happened in between).
   */
  async watch(key: string, onChange: () => void): Promise<() => void> {
    let live = true;
    let current: Watcher | null = null;
    const rearm = (): void => {
      if (!live || this.closed) return;
      arm().catch(() => {
        if (live && !this.closed) setTimeout(rearm, 1000).unref();
      });
    };
    const arm = async (): Promise<void> => {
      const w = await this.client.watch().prefix(entriesOf(key)).create();
      if (!live || this.closed) return void w.cancel().catch(() => {});
      current = w;
      this.watchers.add(w);
      w.on('data', () => onChange());
      w.on('connected', () => onChange()); // a reconnect may have missed events: look again
      w.on('error', () => {
        this.watchers.delete(w);
        if (current === w) current = null;
        onChange();
        rearm();
      });
    };
    await arm();
    return () => {
      live = false;
      const w = current;
      current = null;
      if (w) {
        this.watchers.delete(w);
        void w.cancel().catch(() => {});
      }
    };
  }

  /** Ends every watch (the waiters' waits resolve by their own bounds or signals). */
  close(): void {
    this.closed = true;
    for (const w of this.watchers) void w.cancel().catch(() => {});
    this.watchers.clear();
    void this.anchor?.cancel().catch(() => {});
    this.anchor = null;
  }
}
