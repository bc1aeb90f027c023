/**
 * Giving back what an acquire no longer wants (src/acquire.ts): a grant that arrived after its
 * caller gave up is released, a place in the queue is left, and the tokens of attempts that
 * failed with a BackendError (each may have queued or been granted on the server, its reply
 * lost) are given back, leave then release, before a wait goes on under a new token.
 */
import type { Backend } from './backend.js';
import type { Calls } from './calls.js';
import { BackendError, QuorumError } from './errors.js';
import { isTransient } from './transient.js';

/** A failed attempt that a wait retries until its deadline. */
export type Failure = QuorumError | BackendError;

/** A failure that may pass by itself soon (src/transient.ts): a wait tries again. */
export function retryable(e: unknown): e is Failure {
  return (e instanceof QuorumError || e instanceof BackendError) && isTransient(e);
}

/** The lock an acquire is about: its key as the caller named it (for errors) and in full. */
interface Key {
  readonly key: string;
  readonly fullKey: string;
}

export class GiveBack {
  constructor(private readonly host: { readonly backend: Backend; readonly calls: Calls }) {}

  /**
   * Gives back tokens whose attempts failed with a BackendError (each leaves the queue, and a
   * grant it may have got is released, token-checked), oldest first; the ones given back leave
   * `stale`. Returns the transient failure that stopped it (the backend still fails: the wait
   * pauses and tries again), else null; any other error (a refused permission) is thrown, as it
   * is from an attempt.
   */
  async sweep(p: Key, stale: string[], signal: AbortSignal): Promise<Failure | null> {
    const { backend, calls } = this.host;
    while (stale.length > 0) {
      const t = stale[0]!;
      const o = { key: p.key, signal, secrets: [t] };
      try {
        if (backend.leave) await calls.run('leave', () => backend.leave!(p.fullKey, t), o);
        await calls.run('release', () => backend.release(p.fullKey, t), o);
      } catch (e) {
        if (retryable(e)) return e;
        throw e;
      }
      stale.shift();
    }
    return null;
  }

  /** Token-checked release of a grant nobody wants any more; tracked, so close() waits for it. */
  giveBack(p: Key, token: string): Promise<unknown> {
    const { backend, calls } = this.host;
    return calls.run('release', () => backend.release(p.fullKey, token), { key: p.key }).catch(() => false);
  }

  /** Leaves the queue (unless it never queued), then releases: what a failed attempt may have left. */
  async abandon(p: Key, token: string, queued = true): Promise<void> {
    if (queued && this.host.backend.leave) await this.leave(p, token);
    await this.giveBack(p, token);
  }

  /**
   * `abandon` in the background, tracked as a whole so close() waits for both of its calls (the
   * release starts only once the leave settled).
   */
  abandonLater(p: Key, token: string): void {
    this.host.calls.track(this.abandon(p, token));
  }

  /**
   * An attempt that failed with a BackendError or a QuorumError may still have run on the server
   * (its reply was lost): whatever it left under `token` is given back before the error is thrown,
   * or the lock would be held for its whole TTL by a token nobody has.
   */
  failed(p: Key, token: string, e: unknown): unknown {
    if (e instanceof BackendError || e instanceof QuorumError) this.abandonLater(p, token);
    return e;
  }

  leave(p: Key, token: string): Promise<unknown> {
    const { backend, calls } = this.host;
    return calls.run('leave', () => backend.leave!(p.fullKey, token), { key: p.key }).catch(() => {});
  }
}
