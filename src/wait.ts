/** Waiting: deadlines, abortable sleeps, jittered capped backoff, the one promise-timeout helper. */
import { setTimeout as delay } from 'node:timers/promises';
import { BackendError, InvalidArgumentError } from './errors.js';
import { deadlines, Timed } from './deadlines.js';
import { toMs } from './duration.js';
import { checkOptions } from './validate.js';
import { markTransient } from './transient.js';

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

/** Parses a backoff option; `name` is the option as its caller calls it (`retry`, `backoff`). */
export function parseRetry(v: unknown, where: string, name = 'retry'): Backoff {
  const o = checkOptions<RetryOptions>(v, ['minDelay', 'maxDelay', 'factor'], `${where}.${name}`);
  const minMs = o.minDelay === undefined ? 10 : toMs(o.minDelay, `${name}.minDelay`);
  const maxMs = o.maxDelay === undefined ? 500 : toMs(o.maxDelay, `${name}.maxDelay`);
  const factor = o.factor ?? 2;
  if (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1) {
    throw new InvalidArgumentError(`${name}.factor must be a finite number ≥ 1`);
  }
  if (maxMs < minMs) throw new InvalidArgumentError(`${name}.maxDelay must be ≥ ${name}.minDelay`);
  return { minMs, maxMs, factor };
}

/**
 * Capped exponential backoff with full jitter above the floor: the n-th delay is uniform in
 * [min, min(max, min·factor^n)]. (Not "decorrelated" jitter: a delay does not depend on the last.)
 */
export function backoffDelay(b: Backoff, attempt: number): number {
  const cap = Math.min(b.maxMs, b.minMs * Math.pow(b.factor, Math.min(attempt, 30)));
  return b.minMs + Math.random() * (cap - b.minMs);
}

/** Resolves after `ms`, or early (never rejecting) when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return delay(Math.max(0, ms), undefined, signal ? { signal } : undefined).then(
    () => {},
    () => {}, // aborted: resolve early
  );
}

export interface RaceOptions<T> {
  /** Gives up after this many ms (omitted or Infinity: no timer). */
  ms?: number;
  /** The rejection when the timer wins (default a BackendError naming the bound). */
  onTimeout?: () => unknown;
  /** Gives up (rejecting with the signal's reason) when it, or any of them, aborts. */
  signal?: AbortSignal | readonly (AbortSignal | undefined)[] | undefined;
  /** Gets the value if `p` fulfils after the race was given up (e.g. to release a late grant). */
  late?: (value: T) => void;
}

/**
 * Settles as `p` does, unless `ms` passes or `signal` aborts first: then it rejects at once, and
 * `p` is left to settle on its own (a late value goes to `late`, a late error is dropped). The
 * one promise-timeout helper of the engine and the backends.
 */
export function race<T>(p: Promise<T>, o: RaceOptions<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const r = new Racer<T>(o, resolve, reject);
    p.then(
      (v) => r.value(v),
      (e: unknown) => r.error(e),
    );
    if (r.over) return;
    const s = o.signal;
    if (isList(s)) {
      for (const x of s) if (x?.aborted) return r.handleEvent();
      for (const x of s) x?.addEventListener('abort', r, { once: true });
    } else if (s) {
      if (s.aborted) return r.handleEvent();
      s.addEventListener('abort', r, { once: true });
    }
    const ms = o.ms;
    if (ms !== undefined && Number.isFinite(ms)) deadlines.add(r, ms);
  });
}

const isList = (s: RaceOptions<unknown>['signal']): s is readonly (AbortSignal | undefined)[] => Array.isArray(s);

/** One race: its own abort listener and timer argument (no closures per race but the two below). */
class Racer<T> extends Timed {
  over = false;
  constructor(
    readonly o: RaceOptions<T>,
    readonly resolve: (v: T) => void,
    readonly reject: (e: unknown) => void,
  ) {
    super();
  }

  finish(): boolean {
    if (this.over) return false;
    this.over = true;
    deadlines.remove(this);
    const s = this.o.signal;
    if (isList(s)) for (const x of s) x?.removeEventListener('abort', this);
    else s?.removeEventListener('abort', this);
    return true;
  }

  /** A signal aborted: rejects with the reason of the first aborted one. */
  handleEvent(): void {
    const s = this.o.signal;
    const hit = isList(s) ? s.find((x) => x?.aborted) : s;
    if (hit?.aborted && this.finish()) this.reject(hit.reason);
  }

  /** The bound passed. */
  fire(): void {
    const o = this.o;
    if (this.finish())
      this.reject(
        o.onTimeout ? o.onTimeout() : markTransient(new BackendError(`no answer within ${Math.round(o.ms!)}ms`)),
      );
  }

  value(v: T): void {
    if (this.finish()) this.resolve(v);
    else this.o.late?.(v);
  }

  error(e: unknown): void {
    if (this.finish()) this.reject(e);
  }
}

/**
 * A sleep that ends once: at its bound (on the shared timer), at its signal's abort, or when
 * `done()` is called (a wake-up). A subclass says how it leaves its waker's bookkeeping. One
 * object per sleep, no closures: the Redis and Postgres waits sleep on it once per handoff.
 */
export abstract class Sleep extends Timed {
  constructor(
    private readonly signal: AbortSignal,
    private readonly resolve: () => void,
  ) {
    super();
  }

  /** Leaves whatever holds it for wake-ups; false if it had already ended. */
  protected abstract detach(): boolean;

  /** Sleeps at most `ms` (the signal must not be aborted yet). */
  start(ms: number): void {
    deadlines.add(this, ms);
    this.signal.addEventListener('abort', this, { once: true });
  }

  /** Woken, timed out or aborted: returns once (a second call does nothing). */
  done(): void {
    if (!this.detach()) return;
    deadlines.remove(this);
    this.signal.removeEventListener('abort', this);
    this.resolve();
  }

  fire(): void {
    this.done();
  }

  handleEvent(): void {
    this.done();
  }
}

/**
 * A signal that aborts when any input aborts; `dispose()` detaches the listeners. Not
 * `AbortSignal.any`: on Node 20 (measured on 20.20.2) every `AbortSignal.any` call stays
 * referenced by a long-lived input signal (a Locks' close signal, a user's shutdown signal)
 * until that one aborts — a leak of ~70 bytes per call, ~1.2 kB with a listener left on it
 * (nodejs/node#54614, #55351). Detaching explicitly leaks nothing.
 */
export function anySignal(signals: (AbortSignal | undefined)[]): LinkedSignal {
  return new LinkedSignal(signals);
}

/**
 * A controller whose signal also aborts when any input aborts (`anySignal`); `abort(reason)`
 * aborts it directly (a deadline, a kick), `dispose()` detaches it from the inputs. It is its
 * own listener: one controller and no closure per use, on every waiting acquire's path.
 */
export class LinkedSignal {
  private readonly ctrl = new AbortController();
  private readonly inputs: (AbortSignal | undefined)[];

  constructor(inputs: (AbortSignal | undefined)[]) {
    this.inputs = inputs;
    for (const s of inputs) {
      if (!s) continue;
      if (s.aborted) {
        this.ctrl.abort(s.reason);
        break;
      }
      s.addEventListener('abort', this, { once: true });
    }
  }

  get signal(): AbortSignal {
    return this.ctrl.signal;
  }

  abort(reason?: unknown): void {
    this.ctrl.abort(reason);
  }

  /** An input aborted (this object is the listener). */
  handleEvent(e: Event): void {
    this.ctrl.abort((e.target as AbortSignal).reason);
  }

  dispose(): void {
    for (const s of this.inputs) s?.removeEventListener('abort', this);
  }
}

/**
 * A FIFO of local turns per key: within one process at most one acquire per key talks to the
 * backend; the others wait here in arrival order.
 */
export class TurnQueue {
  /** A key's waiters; null while its turn is taken and nobody waits (no array per turn). */
  private readonly queues = new Map<string, Array<() => void> | null>();

  /** True if someone holds the turn for `key`. */
  busy(key: string): boolean {
    return this.queues.has(key);
  }

  /** Takes the turn for a key nobody holds (check `busy` first). */
  takeNow(key: string): void {
    if (!this.queues.has(key)) this.queues.set(key, null);
  }

  /** Resolves when it is the caller's turn; rejects with signal.reason if aborted first. */
  take(key: string, signal: AbortSignal): Promise<void> {
    if (!this.queues.has(key)) {
      this.queues.set(key, null);
      return Promise.resolve();
    }
    let q = this.queues.get(key);
    if (!q) this.queues.set(key, (q = []));
    const line = q;
    return new Promise<void>((resolve, reject) => {
      const grant = () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        const i = line.indexOf(grant);
        if (i >= 0) line.splice(i, 1);
        reject(signal.reason);
      };
      if (signal.aborted) return reject(signal.reason);
      line.push(grant);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Passes the turn for `key` to the next in line. */
  pass(key: string): void {
    const q = this.queues.get(key);
    const next = q?.shift();
    if (next) next();
    else this.queues.delete(key);
  }
}
