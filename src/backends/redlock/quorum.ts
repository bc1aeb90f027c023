/**
 * One parallel round over N nodes that decides as soon as the answers so far allow it, so a slow
 * or dead node never delays the outcome. Every node call has its own timeout; a call still in
 * flight when the round is decided is a straggler, and its late answer stays observable through
 * `late` (the caller releases a late grant, say).
 */
import { BackendError } from '../../errors.js';

export type Outcome<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: Error };

export interface RoundResult<D, T> {
  readonly decision: D;
  /** Each node's outcome at decision time (undefined: no answer yet). Timeouts are errors here. */
  readonly outcomes: readonly (Outcome<T> | undefined)[];
  /** For nodes whose call had not really settled at decision time: its eventual outcome. */
  readonly late: readonly (Promise<Outcome<T>> | undefined)[];
}

/**
 * Which nodes recently failed to answer in time. A suspect node still gets every call, but a round
 * counts it as failed at once instead of waiting for its timeout again; its next reply (late or
 * not) clears the suspicion. So a dead or frozen node costs one timeout, not one per round.
 */
export class Health {
  private readonly since: (number | null)[];
  constructor(n: number) {
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
        timers[i] = setTimeout(
          () => {
            if (outcomes[i] !== undefined) return;
            health?.timedOut(i);
            record(i, { ok: false, error: new BackendError(`${describe(i)}: no reply within ${timeoutMs}ms`) });
          },
          Math.max(1, timeoutMs),
        );
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
  const msg = e instanceof Error ? e.message : String(e);
  return new BackendError(`${node}: ${msg}`, { cause: e });
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
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(fallback), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      () => {
        clearTimeout(t);
        resolve(fallback);
      },
    );
  });
}
