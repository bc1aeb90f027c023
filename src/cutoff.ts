/**
 * A session backend's close cutoff, on a client of leasehold's own (fromUrl) only: etcd (its
 * lease ends by its TTL) and Postgres (its advisory locks end with its connections). `Locks.close()`
 * calls the driver's `closing()` first; from then on a call that the server does not answer
 * within CLOSE_GRACE_MS gives the server up, and no later call waits for it: what the backend
 * holds ends with its session. A call already in flight when close began (an acquire, a waiter's
 * leave, a renewal) is bounded the same way, counted from `closing()`: the engine waits for each
 * until it settles, so one left unbounded kept close() waiting its `opTimeout`. A caller's client
 * is left alone (its session outlives close()).
 */
import { BackendError } from './errors.js';
import { race } from './wait.js';

/**
 * After close() began on a client of our own: how long one call (a release, the revoke, an
 * acquire in flight) may wait for a server that does not answer before the server is given up
 * (ZooKeeper's too).
 */
export const CLOSE_GRACE_MS = 1000;

/** A call in flight before close began: `bound` gives it CLOSE_GRACE_MS from then. */
interface InFlight {
  bound(): void;
}

export class Cutoff {
  /** fromUrl made the client: close() is its end, and the lease's. */
  owned = false;
  /** close() began on our own client: a server out of reach is waited for CLOSE_GRACE_MS per call. */
  private ending = false;
  /** A call during close() found the server out of reach: none is waited for any more. */
  private cut = false;
  /** Calls on our own client not settled yet, bounded once close begins. */
  private readonly inFlight = new Set<InFlight>();

  /** `message`: the error of a call given up (what ends the backend's locks, for the reader). */
  constructor(private readonly message: string) {}

  /** The server was given up during close(): nothing waits for it any more. */
  get gaveUp(): boolean {
    return this.cut;
  }

  /** close() begins (the driver's `closing()`): the calls in flight are bounded from now. */
  begin(): void {
    if (!this.owned || this.ending) return;
    this.ending = true;
    for (const f of [...this.inFlight]) f.bound();
  }

  /**
   * `p` as is on a caller's client; on our own, bounded by CLOSE_GRACE_MS once close() began
   * (from when it began, for a call already in flight). `p` is never cancelled: sent, it still
   * acts on a server back in time.
   */
  bound<T>(p: Promise<T>): Promise<T> {
    if (!this.owned) return p;
    if (this.ending) return this.grace(p);
    return new Promise<T>((resolve, reject) => {
      const f: InFlight = { bound: () => void this.grace(p).catch(reject) };
      this.inFlight.add(f);
      p.then(
        (v) => {
          this.inFlight.delete(f);
          resolve(v);
        },
        (e: unknown) => {
          this.inFlight.delete(f);
          reject(e);
        },
      );
    });
  }

  private grace<T>(p: Promise<T>): Promise<T> {
    if (this.cut) {
      p.catch(() => {}); // sent anyway: a server back in time still acts on it
      return Promise.reject(new BackendError(this.message));
    }
    return race(p, {
      ms: CLOSE_GRACE_MS,
      onTimeout: () => {
        this.cut = true;
        return new BackendError(this.message);
      },
    });
  }
}
