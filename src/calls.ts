/**
 * Every call the engine makes to a backend goes through here. A call is bounded: it settles by
 * its own bound (`opTimeout`, or a deadline that is shorter), or at once when its signal aborts
 * (the caller's signal, a `wait` deadline, `close()`), even when the client behind it never
 * answers (ioredis with Redis dead, `maxRetriesPerRequest: null`, a frozen proxy). The backend's
 * own promise is kept in a set until it really settles, so `close()` can wait for it (bounded)
 * and give back what it got; a grant that arrives after its caller gave up is released, and so is
 * whatever an attempt whose error arrives after its caller gave up may have left on the server.
 * Errors are normalised to LeaseholdErrors and scrubbed of tokens and passwords.
 */
import { deadlines, Timed } from './deadlines.js';
import { BackendError, LeaseholdError } from './errors.js';
import { scrubError } from './scrub.js';
import { markTransient } from './transient.js';

export interface CallOptions<T> {
  /** The key the call is about, for error messages (`extend of "order:42" …`). */
  key?: string;
  /** The bound in ms (default: opTimeout). */
  ms?: number;
  /** Gives up at once (rejecting with its reason) when it aborts. */
  signal?: AbortSignal | undefined;
  /** Gives up at once when the Locks closes (`abortAll`). */
  closable?: boolean;
  /** The rejection when the bound passes (default: a BackendError naming opTimeout). */
  onTimeout?: (() => unknown) | undefined;
  /** A value that arrives after the caller gave up (a late grant: release it). Tracked too. */
  late?: (value: T) => Promise<unknown> | void;
  /**
   * An error that arrives after the caller gave up: the call may still have run on the server (its
   * reply was lost), so what it may have left is given back now that it settled. Tracked too.
   */
  lateError?: (error: unknown) => Promise<unknown> | void;
  /** Strings that must never appear in an error (the lease's token). */
  secrets?: readonly string[];
}

const NO_OPTIONS: CallOptions<unknown> = {};

/**
 * One call in flight: the caller's side of it. A class rather than closures, since this is on
 * every acquire's and release's path (it is its own abort listener and timer argument).
 */
interface GiveUp {
  giveUp(reason: unknown): void;
}

class Pending<T> extends Timed implements GiveUp {
  over = false;

  constructor(
    readonly calls: Calls,
    readonly what: string,
    readonly o: CallOptions<T>,
    readonly ms: number,
    readonly resolve: (v: T) => void,
    readonly reject: (e: unknown) => void,
  ) {
    super();
  }

  /** Stops waiting; false if the outcome was already decided. */
  finish(): boolean {
    if (this.over) return false;
    this.over = true;
    deadlines.remove(this);
    this.o.signal?.removeEventListener('abort', this);
    if (this.o.closable) this.calls.waiting.delete(this);
    return true;
  }

  giveUp(reason: unknown): void {
    if (this.finish()) this.reject(reason);
  }

  /** The signal aborted (this object is the listener). */
  handleEvent(): void {
    this.giveUp(this.o.signal!.reason);
  }

  /** The bound passed. */
  fire(): void {
    const { o, ms, calls, what } = this;
    this.giveUp(o.onTimeout ? o.onTimeout() : calls.timeoutError(what, o.key, ms));
  }

  settled(v: T): void {
    if (this.finish()) this.resolve(v);
    else if (this.o.late) this.calls.lateValue(v, this.o.late);
    this.calls.done();
  }

  failed(e: unknown): void {
    if (this.finish()) this.reject(this.calls.error(e, this.what, this.o.secrets, this.o.key));
    else if (this.o.lateError) this.calls.lateValue(e, this.o.lateError);
    this.calls.done();
  }
}

export class Calls {
  /** Backend calls (abandoned ones included) and clean-ups not settled yet. */
  private pending = 0;
  private idle: Array<() => void> = [];
  /** Callers waiting on a closable call: told at once by `abortAll`. */
  readonly waiting = new Set<GiveUp>();
  private aborted: { reason: unknown } | null = null;

  constructor(
    private readonly backendName: string,
    readonly opTimeoutMs: number,
  ) {}

  /** Number of backend calls and clean-ups not settled yet (abandoned ones included). */
  get inFlight(): number {
    return this.pending;
  }

  /**
   * Runs `start()` (one backend call) bounded by `ms` (default opTimeout), `signal` and (when
   * `closable`) `abortAll`. The backend's promise stays tracked until it settles, and so does the
   * `late` (`lateError`) clean-up of a value (an error) that arrives after the caller gave up:
   * decided in the same turn as it arrives, so a late grant is never missed.
   */
  run<T>(what: string, start: () => Promise<T>, o: CallOptions<T> = NO_OPTIONS as CallOptions<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (o.closable && this.aborted) return reject(this.aborted.reason);
      if (o.signal?.aborted) return reject(o.signal.reason);
      let p: Promise<T>;
      try {
        p = start();
      } catch (e) {
        p = Promise.reject(e);
      }
      const ms = o.ms ?? this.opTimeoutMs;
      const call = new Pending<T>(this, what, o, ms, resolve, reject);
      deadlines.add(call, ms);
      o.signal?.addEventListener('abort', call, { once: true });
      if (o.closable) this.waiting.add(call);
      this.pending++;
      // inline arrows, not named closures: no per-call name to define under a keepNames build
      p.then(
        (v) => call.settled(v),
        (e: unknown) => call.failed(e),
      );
    });
  }

  /** @internal a value (or an error) that arrived after its caller gave up. */
  lateValue<V>(v: V, late: (value: V) => Promise<unknown> | void): void {
    this.pending++;
    Promise.resolve(v).then(late).then(this.done, this.done);
  }

  /** @internal */
  readonly done = (): void => {
    if (--this.pending > 0) return;
    const idle = this.idle;
    this.idle = [];
    for (const f of idle) f();
  };

  /** Tracks a promise (a fire-and-forget clean-up) until it settles. */
  track(p: Promise<unknown>): void {
    this.pending++;
    p.then(this.done, this.done);
  }

  /** Every caller waiting on a closable call rejects with `reason` now; later closable calls too. */
  abortAll(reason: unknown): void {
    this.aborted = { reason };
    for (const call of [...this.waiting]) call.giveUp(reason);
  }

  /** Resolves once every tracked call settled, or after `ms` (whichever is first). */
  drain(ms: number): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const finish = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(finish, Math.max(0, ms));
      this.idle.push(finish);
    });
  }

  /** @internal */
  timeoutError(what: string, key: string | undefined, ms: number): BackendError {
    // a bound shorter than opTimeout is the lease's validity: a later grant would be void already
    const why = ms < this.opTimeoutMs ? "the lease's validity, shorter than opTimeout" : 'opTimeout';
    return markTransient(
      new BackendError(
        `${this.backendName}: ${describe(what, key)} did not answer within ${Math.round(ms)}ms (${why})`,
      ),
    );
  }

  /** A LeaseholdError without secrets: the backend's own, or a BackendError around a client's. */
  error(e: unknown, what: string, secrets: readonly string[] = [], key?: string): unknown {
    if (e instanceof LeaseholdError) return scrubError(e, secrets);
    const cause = scrubError(e, secrets);
    return new BackendError(`${this.backendName}: ${describe(what, key)} failed: ${cause.message}`, { cause });
  }
}

const describe = (what: string, key: string | undefined) => (key === undefined ? what : `${what} of "${key}"`);
