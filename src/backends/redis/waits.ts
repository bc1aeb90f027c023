/**
 * One backend's waits for push wake-ups, by lock key — shared by the Redis and Redlock wake-ups
 * (each has its own channel and message format; what a wake-up means for a waiter is the same).
 * A queued attempt counts wake-ups from before it is sent (one may overtake its reply); a refused
 * waiter then sleeps until a wake-up it has not seen yet, the holder's expiry as the refusal
 * reported it (a crashed holder publishes nothing), the caller's bound, or its abort.
 */
import { Sleep } from '../../wait.js';

/** What a refused waiter needs to wait well. */
interface Refusal {
  /** Wake-ups for the key when the refused attempt was sent. */
  wakes: number;
  /** When the lock can be free at the earliest, as the refusal reported it (0: unknown). */
  hintMs: number;
}

export class KeyedWaits {
  /** Waiting calls by lock key. */
  private readonly waiters = new Map<string, Set<Sleeper>>();
  /** Per lock key: this backend's refused waiter. */
  private readonly refusals = new Map<string, Refusal>();
  /** Wake-ups received per lock key, while one of this backend's calls waits on it. */
  private readonly wakes = new Map<string, number>();
  /**
   * Per lock key: the waiters (by token) that said who they are. Several may wait on one key
   * through one backend (two Locks on it): one that is done must not deafen the others.
   */
  private readonly owners = new Map<string, Set<string>>();

  /**
   * Before a queued attempt of waiter `who` is sent: counts wake-ups for `key` from now on and
   * returns how many it has had.
   */
  before(key: string, who?: string): number {
    if (who !== undefined) {
      const set = this.owners.get(key);
      if (set) set.add(who);
      else this.owners.set(key, new Set([who]));
    }
    const n = this.wakes.get(key);
    if (n !== undefined) return n;
    this.wakes.set(key, 0);
    return 0;
  }

  refused(key: string, wakes: number, hintMs: number): void {
    this.refusals.set(key, { wakes, hintMs });
  }

  /**
   * The waiter `who` on `key` got the lock, gave up, or failed (no `who`: every waiter on it).
   * True when no other waiter of this backend waits on `key`: its state is gone.
   */
  forget(key: string, who?: string): boolean {
    const set = this.owners.get(key);
    if (set && who !== undefined) {
      set.delete(who);
      if (set.size > 0) return false; // another waiter still counts on the key's wake-ups
    }
    this.owners.delete(key);
    this.refusals.delete(key);
    this.wakes.delete(key);
    return true;
  }

  /** Whether one of this backend's calls waits on `key` (a wake-up for it means something). */
  waiting(key: string): boolean {
    return this.wakes.has(key);
  }

  /** A wake-up for `key`: counted, and the calls sleeping on it return. */
  wake(key: string): void {
    const n = this.wakes.get(key);
    if (n === undefined) return; // nobody here waits on it any more
    this.wakes.set(key, n + 1);
    const set = this.waiters.get(key);
    if (set) for (const w of [...set]) w.done();
  }

  /** Sleeps as described above; `maxMs` is already the caller's bound (≥ 1). */
  wait(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted) return Promise.resolve(); // its listener would never run
    const r = this.refusals.get(key);
    if (r && (this.wakes.get(key) ?? 0) !== r.wakes) return Promise.resolve(); // woken while we were trying
    const bound = Math.max(1, Math.min(maxMs, r && r.hintMs > 0 ? r.hintMs + 2 : maxMs));
    let set = this.waiters.get(key);
    if (!set) this.waiters.set(key, (set = new Set()));
    const mine = set;
    return new Promise<void>((resolve) => {
      const w = new Sleeper(this.waiters, key, mine, signal, resolve);
      mine.add(w);
      w.start(bound);
    });
  }

  /** Every sleeping call returns. */
  close(): void {
    for (const set of [...this.waiters.values()]) for (const w of [...set]) w.done();
    this.waiters.clear();
    this.owners.clear();
  }
}

/** One sleeping call on a key: it leaves the key's set of sleepers once. */
class Sleeper extends Sleep {
  constructor(
    private readonly waiters: Map<string, Set<Sleeper>>,
    private readonly key: string,
    private readonly set: Set<Sleeper>,
    signal: AbortSignal,
    resolve: () => void,
  ) {
    super(signal, resolve);
  }

  protected detach(): boolean {
    if (!this.set.delete(this)) return false;
    if (this.set.size === 0 && this.waiters.get(this.key) === this.set) this.waiters.delete(this.key);
    return true;
  }
}
