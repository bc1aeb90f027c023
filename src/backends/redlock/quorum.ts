/**
 * One parallel round over N nodes that decides as soon as the answers so far allow it, so a slow
 * or dead node never delays the outcome. Every node call has its own timeout; a call still in
 * flight when the round is decided is a straggler, and its late answer stays observable through
 * `late` (the caller releases a late grant, say).
 */
import { BackendError } from '../../errors.js';
import { scrubError } from '../../scrub.js';
import { race } from '../../wait.js';

/** A timer this late means our own event loop was stalled, not that the node was slow. */
const STALL_MS = 25;

export type Outcome<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: Error };

export interface RoundResult<D, T> {
  readonly decision: D;
  /** Each node's outcome at decision time (undefined: no answer yet). Timeouts are errors here. */
  readonly outcomes: readonly (Outcome<T> | undefined)[];
  /** For nodes whose call had not really settled at decision time: its eventual outcome. */
  readonly late: readonly (Promise<Outcome<T>> | undefined)[];
}

/**
 * Which nodes recently failed to answer within the node timeout. A suspect node still gets every
 * call, but a round counts it as failed at once instead of waiting for its timeout again; its next
 * reply (late or not) clears the suspicion. So a dead or frozen node costs one timeout, not one per
 * round. Only a silence of the full node timeout makes a node suspect: a round with a shorter
 * deadline of its own (a short-TTL acquire) judges its own attempt, never the node for others.
 */
export class Health {
  private readonly since: (number | null)[];
  constructor(
    n: number,
    readonly nodeTimeoutMs: number,
  ) {
    this.since = Array.from({ length: n }, () => null);
  }
  suspect(i: number): number | null {
    return this.since[i] ?? null;
  }
  timedOut(i: number): void {
    this.since[i] ??= performance.now();
  }
  answered(i: number): void {
    this.since[i] = null;
  }
}

/**
 * A node's silence past a round's deadline. `short`: the deadline was the attempt's own (shorter
 * than the node timeout, e.g. a lease's validity), so it says nothing about the node's health.
 */
export class NoReplyError extends BackendError {
  constructor(
    message: string,
    readonly short: boolean,
  ) {
    super(message);
  }
}

/** A node failure that counts against the quorum (a short deadline of the attempt's own does not). */
export const isHardFailure = (e: Error): boolean => !(e instanceof NoReplyError && e.short);

/**
 * Calls `call(i)` for every node index in `indices`, each bounded by `timeoutMs`, and after each
 * answer asks `decide(outcomes)`; the first non-undefined answer ends the round. Once every call
 * has answered (or timed out), `decide` must return a decision.
 */
export function round<T, D>(
  indices: readonly number[],
  call: (i: number) => Promise<T>,
  timeoutMs: number,
  decide: (outcomes: readonly (Outcome<T> | undefined)[], pending: number) => D | undefined,
  describe: (i: number) => string,
  health?: Health,
): Promise<RoundResult<D, T>> {
  return new Promise((resolve, reject) => {
    const outcomes: (Outcome<T> | undefined)[] = [];
    const raw: Promise<Outcome<T>>[] = [];
    const settled: boolean[] = [];
    const timers: NodeJS.Timeout[] = [];
    let pending = indices.length;
    let done = false;
    const finish = (decision: D) => {
      done = true;
      for (const t of timers) clearTimeout(t);
      const late = raw.map((p, i) => (settled[i] ? undefined : p));
      resolve({ decision, outcomes: [...outcomes], late });
    };
    const record = (i: number, o: Outcome<T>) => {
      if (done || outcomes[i] !== undefined) return;
      clearTimeout(timers[i]);
      outcomes[i] = o;
      pending--;
      try {
        const d = decide(outcomes, pending);
        if (d !== undefined) finish(d);
        else if (pending === 0) throw new Error('redlock: round undecided after every node answered');
      } catch (e) {
        done = true;
        for (const t of timers) clearTimeout(t);
        reject(e);
      }
    };
    for (const i of indices) {
      let p: Promise<T>;
      try {
        p = call(i);
      } catch (e) {
        p = Promise.reject(e);
      }
      raw[i] = p.then(
        (value): Outcome<T> => ({ ok: true, value }),
        (e: unknown): Outcome<T> => ({ ok: false, error: nodeError(describe(i), e) }),
      );
      settled[i] = false;
      void raw[i].then((o) => {
        settled[i] = true;
        if (o.ok || !/timeout|timed out/i.test(o.error.message)) health?.answered(i);
        record(i, o);
      });
    }
    // Only after every call went out: a decision may already come from the suspects.
    for (const i of indices) {
      if (done) break;
      const since = health?.suspect(i);
      if (since != null) {
        const ago = Math.round(performance.now() - since);
        record(i, { ok: false, error: new BackendError(`${describe(i)}: unresponsive (no reply for ${ago}ms)`) });
      } else if (Number.isFinite(timeoutMs) && outcomes[i] === undefined) {
        const arm = (ms: number, extended: boolean) => {
          const due = performance.now() + ms;
          timers[i] = setTimeout(() => {
            // After an event-loop stall the timer may fire before the poll phase has read replies
            // that arrived long ago: let I/O run first (setImmediate follows the poll phase).
            setImmediate(() => {
              if (done || outcomes[i] !== undefined) return;
              // Our own process was stalled (GC, a busy loop) while the node waited to be heard:
              // give the node the stall's length once more before judging it.
              const lag = performance.now() - due;
              if (!extended && lag > STALL_MS) return arm(Math.min(lag, Math.max(1, timeoutMs)), true);
              const short = !health || timeoutMs < health.nodeTimeoutMs;
              if (!short) health.timedOut(i);
              const why = short ? ` (the attempt's own deadline)` : '';
              const error = new NoReplyError(`${describe(i)}: no reply within ${timeoutMs}ms${why}`, short);
              record(i, { ok: false, error });
            });
          }, ms);
        };
        arm(Math.max(1, timeoutMs), false);
      }
    }
    if (indices.length === 0) {
      try {
        const d = decide(outcomes, 0);
        if (d === undefined) throw new Error('redlock: empty round undecided');
        finish(d);
      } catch (e) {
        reject(e);
      }
    }
  });
}

function nodeError(node: string, e: unknown): Error {
  const cause = scrubError(e); // never a client's error as is: it may carry a token
  return new BackendError(`${node}: ${cause.message}`, { cause });
}

/** Tally of a round: how many nodes said yes, no, or failed. */
export function tally<T>(
  outcomes: readonly (Outcome<T> | undefined)[],
  yes: (value: T) => boolean,
): { yes: number; no: number; failed: number } {
  let y = 0;
  let n = 0;
  let f = 0;
  for (const o of outcomes) {
    if (o === undefined) continue;
    if (!o.ok) f++;
    else if (yes(o.value)) y++;
    else n++;
  }
  return { yes: y, no: n, failed: f };
}

/** One cause per node: its error, or null if it answered (or had not yet). */
export const causesOf = (outs: readonly (Outcome<unknown> | undefined)[], n: number): (Error | null)[] =>
  Array.from({ length: n }, (_, i) => {
    const o = outs[i];
    return o && !o.ok ? o.error : null;
  });

/** Resolves with `p`'s value, or `fallback` after `ms` or if `p` rejects. */
export function bounded<T>(p: Promise<T>, ms: number, fallback: T): Promise<T> {
  return race(p, { ms }).catch(() => fallback);
}
