/** Waiting: deadlines, abortable sleeps, jittered capped backoff. */
import { InvalidArgumentError } from './errors.js';
import { toMs } from './duration.js';
import { checkOptions } from './validate.js';

export const now = (): number => performance.now();

export interface RetryOptions {
  /** First delay between polls (default 10ms). */
  minDelay?: number | string;
  /** Cap of the delay (default 500ms). */
  maxDelay?: number | string;
  /** Growth per attempt (default 2). */
  factor?: number;
}

export interface Backoff {
  readonly minMs: number;
  readonly maxMs: number;
  readonly factor: number;
}

export function parseRetry(v: unknown, where: string): Backoff {
  const o = checkOptions<RetryOptions>(v, ['minDelay', 'maxDelay', 'factor'], `${where}.retry`);
  const minMs = o.minDelay === undefined ? 10 : toMs(o.minDelay, 'retry.minDelay');
  const maxMs = o.maxDelay === undefined ? 500 : toMs(o.maxDelay, 'retry.maxDelay');
  const factor = o.factor ?? 2;
  if (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1) {
    throw new InvalidArgumentError('retry.factor must be a finite number ≥ 1');
  }
  if (maxMs < minMs) throw new InvalidArgumentError('retry.maxDelay must be ≥ retry.minDelay');
  return { minMs, maxMs, factor };
}

/** "Decorrelated" full jitter: uniform in [min, min(max, min·factor^n)]. */
export function backoffDelay(b: Backoff, attempt: number): number {
  const cap = Math.min(b.maxMs, b.minMs * Math.pow(b.factor, Math.min(attempt, 30)));
  return b.minMs + Math.random() * (cap - b.minMs);
}

/** Resolves after `ms`, or early (never rejecting) when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** A signal that aborts when any input aborts; `dispose()` detaches the listeners. */
export function anySignal(signals: (AbortSignal | undefined)[]): { signal: AbortSignal; dispose(): void } {
  const ctrl = new AbortController();
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  const onAbort = (e: Event) => ctrl.abort((e.target as AbortSignal).reason);
  for (const s of live) {
    if (s.aborted) {
      ctrl.abort(s.reason);
      break;
    }
    s.addEventListener('abort', onAbort, { once: true });
  }
  return {
    signal: ctrl.signal,
    dispose: () => live.forEach((s) => s.removeEventListener('abort', onAbort)),
  };
}

/**
 * A FIFO of local turns per key: within one process at most one acquire per key talks to the
 * backend; the others wait here in arrival order.
 */
export class TurnQueue {
  private readonly queues = new Map<string, Array<() => void>>();

  /** True if someone holds the turn for `key`. */
  busy(key: string): boolean {
    return this.queues.has(key);
  }

  /** Takes the turn for a key nobody holds (check `busy` first). */
  takeNow(key: string): void {
    if (!this.queues.has(key)) this.queues.set(key, []);
  }

  /** Resolves when it is the caller's turn; rejects with signal.reason if aborted first. */
  take(key: string, signal: AbortSignal): Promise<void> {
    const q = this.queues.get(key);
    if (!q) {
      this.queues.set(key, []);
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const grant = () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        const i = q.indexOf(grant);
        if (i >= 0) q.splice(i, 1);
        reject(signal.reason);
      };
      if (signal.aborted) return reject(signal.reason);
      q.push(grant);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Passes the turn for `key` to the next in line. */
  pass(key: string): void {
    const q = this.queues.get(key);
    if (!q) return;
    const next = q.shift();
    if (next) next();
    else this.queues.delete(key);
  }
}
