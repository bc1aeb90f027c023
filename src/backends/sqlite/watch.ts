/**
 * Wake-ups without a server. Two sources:
 *   - local: every sqlite backend of this process on the same database file joins one hub, and a
 *     grant, release or leave announces the key to all of them at once;
 *   - other processes: `PRAGMA data_version` (it changes only when another connection commits)
 *     is polled while anyone waits or watches. Only when it changed are the waited keys read.
 * A waiter polls faster the nearer it is to the head of the queue (the head every 1 ms, the n-th
 * in line every n ms, at most every `maxMs`), so a busy key hands over in about a millisecond
 * while a long queue costs little. Nothing here is a push across processes: SQLite has none.
 */
import type { HostClock } from './clock.js';
import type { PeekRow, Statements } from './schema.js';

type Listener = (key: string) => void;
const hubs = new Map<string, Set<Listener>>();

/** Joins the hub of database `id`; returns the function that leaves it. */
export function joinHub(id: string, listener: Listener): () => void {
  let hub = hubs.get(id);
  if (!hub) hubs.set(id, (hub = new Set()));
  hub.add(listener);
  return () => {
    hub.delete(listener);
    if (hub.size === 0 && hubs.get(id) === hub) hubs.delete(id);
  };
}

/** Tells every backend of this process on database `id` that `key` changed. */
export function announce(id: string, key: string): void {
  const hub = hubs.get(id);
  if (hub) for (const fn of [...hub]) fn(key);
}

/** The fastest poll, for the head of the queue (ms). */
const FAST_MS = 1;

export interface Waiter {
  readonly key: string;
  /** The waiter's holder digest, or null when it has no place in the queue (wake when free). */
  readonly me: string | null;
  /** Poll interval, from its place in the queue. */
  interval: number;
  wake(): void;
}

interface Watched {
  signature: string | null;
  readonly fns: Set<() => void>;
}

export class Poller {
  private readonly waiters = new Map<string, Set<Waiter>>();
  private readonly watched = new Map<string, Watched>();
  private timer: NodeJS.Timeout | null = null;
  private version: unknown = null;
  private stopped = false;

  constructor(
    private readonly st: Statements,
    private readonly clock: HostClock,
    /** The slowest poll while anyone waits or watches (ms). */
    private readonly maxMs: number,
  ) {}

  /**
   * Reads what waiter `me` on `key` sees now. `wake`: try again (the lock is free and it is this
   * waiter's turn, or its place ran out); otherwise `until` is the holder's expiry (host clock).
   */
  look(key: string, me: string | null): { wake: boolean; interval: number; until: number | null } {
    const r = this.st.peek.get({ key, me: me ?? '', now: this.clock.now() }) as PeekRow;
    const free = r.free !== 0;
    const turn = r.head === null || (me !== null && r.head === me);
    const wake = (free && turn) || (me !== null && r.queued === 0);
    const interval = Math.min(this.maxMs, FAST_MS * (me === null ? this.maxMs : Number(r.ahead) + 1));
    return { wake, interval, until: free ? null : r.until };
  }

  add(w: Waiter): void {
    let set = this.waiters.get(w.key);
    if (!set) this.waiters.set(w.key, (set = new Set()));
    set.add(w);
    this.arm();
  }

  remove(w: Waiter): void {
    const set = this.waiters.get(w.key);
    if (!set?.delete(w)) return;
    if (set.size === 0) this.waiters.delete(w.key);
  }

  watch(key: string, fn: () => void): () => void {
    let w = this.watched.get(key);
    if (!w) this.watched.set(key, (w = { signature: this.signature(key), fns: new Set() }));
    w.fns.add(fn);
    this.arm();
    const mine = w;
    return () => {
      mine.fns.delete(fn);
      if (mine.fns.size === 0 && this.watched.get(key) === mine) this.watched.delete(key);
    };
  }

  /** `key` changed in this process (a grant, release or leave announced on the hub). */
  changed(key: string): void {
    const set = this.waiters.get(key);
    if (set) for (const w of [...set]) this.check(w);
    const watched = this.watched.get(key);
    if (watched) {
      watched.signature = this.signature(key);
      this.call(watched);
    }
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const set of [...this.waiters.values()]) for (const w of [...set]) w.wake();
    this.waiters.clear();
    this.watched.clear();
  }

  private signature(key: string): string | null {
    try {
      return (this.st.signature.get(this.clock.now(), key) as string | undefined) ?? null;
    } catch {
      return null;
    }
  }

  private call(w: Watched): void {
    for (const fn of [...w.fns]) queueMicrotask(fn);
  }

  private check(w: Waiter): void {
    try {
      const seen = this.look(w.key, w.me);
      if (seen.wake) w.wake();
      else w.interval = seen.interval;
    } catch {
      w.wake(); // it tries again and meets the error itself
    }
  }

  private arm(): void {
    if (this.stopped || this.timer) return;
    let every = Infinity;
    for (const set of this.waiters.values()) for (const w of set) every = Math.min(every, w.interval);
    if (this.watched.size > 0) every = Math.min(every, this.maxMs);
    if (every === Infinity) return;
    this.timer = setTimeout(() => this.tick(), every);
    this.timer.unref();
  }

  private tick(): void {
    this.timer = null;
    if (this.stopped) return;
    let version: unknown;
    try {
      version = this.st.dataVersion.get();
    } catch {
      version = Symbol('unknown'); // check everything
    }
    if (version !== this.version) {
      this.version = version;
      for (const set of [...this.waiters.values()]) for (const w of [...set]) this.check(w);
      for (const [key, w] of this.watched) {
        const s = this.signature(key);
        if (s !== w.signature) {
          w.signature = s;
          this.call(w);
        }
      }
    }
    this.arm();
  }
}
