/**
 * Leader election over any backend that stores a holder value: a campaign is an acquire that
 * waits as long as it takes; the term is the lease (renewed, fenced, signalled on loss).
 * `elect(name)` without options is an observer: `leader()` and `observe()` work, `campaign()`
 * is refused.
 */
import { EventEmitter } from 'node:events';
import type { Backend } from '../backend.js';
import { toMs, type Duration } from '../duration.js';
import { InvalidArgumentError, NotLeaderError } from '../errors.js';
import { checkTtl, type Lease } from '../lease.js';
import { checkOptions, checkSignal, checkString, checkTaggedKey } from '../validate.js';
import { MAX_DURATION_MS } from '../duration.js';
import { sleep } from '../wait.js';

/** A term of leadership: a lease on the election's key. */
export type Term = Lease;

export interface ElectOptions {
  /** What observers see as the leader (e.g. host:port). Needed to campaign. */
  value: string;
  /** Lease TTL of a term (default: the Locks' ttl). */
  ttl?: Duration;
}

export interface LeaderInfo {
  value: string;
  fence: bigint;
}

/** The events an election emits, with their arguments. */
export interface ElectionEvents {
  /**
   * This candidate became leader: the term (a lease). A listener that throws makes `campaign()`
   * reject with its error, and the term is released first ('demoted' follows).
   */
  elected: [term: Term];
  /** This candidate's term ended: a `LeaseLostError` when lost, a `NotLeaderError` on resign. */
  demoted: [reason: unknown];
}

export interface Election extends EventEmitter {
  readonly name: string;
  /** True while this candidate holds a live term. */
  readonly isLeader: boolean;
  /** Resolves with the term once this candidate leads; waits as long as it takes. */
  campaign(options?: { signal?: AbortSignal }): Promise<Term>;
  /** Gives leadership up (releases the term). Throws NotLeaderError if not leading. */
  resign(): Promise<void>;
  /** The current leader, or null. */
  leader(): Promise<LeaderInfo | null>;
  /**
   * The current leader (or null) first, then each change, until `signal` aborts. Pushed by the
   * backend on every grant and release; an expiry is noticed by a bounded re-check. Changes that
   * happen while the consumer is busy coalesce, but the latest state is never lost.
   */
  observe(options?: { signal?: AbortSignal }): AsyncIterableIterator<LeaderInfo | null>;
  on<E extends keyof ElectionEvents>(event: E, listener: (...args: ElectionEvents[E]) => void): this;
  once<E extends keyof ElectionEvents>(event: E, listener: (...args: ElectionEvents[E]) => void): this;
  off<E extends keyof ElectionEvents>(event: E, listener: (...args: ElectionEvents[E]) => void): this;
  emit<E extends keyof ElectionEvents>(event: E, ...args: ElectionEvents[E]): boolean;
}

/** What an election needs from its Locks. */
export interface ElectionHost {
  readonly backend: Backend;
  acquire(
    key: string,
    options: { value: string; ttl?: Duration; renew: boolean; wait: number; signal?: AbortSignal },
  ): Promise<Lease>;
  inspect(key: string): Promise<{ fence: bigint; remainingMs: number; value?: string } | null>;
  fullKey(key: string): string;
  /** The backend's watch, bounded like every call; null when the backend cannot push. */
  watch(key: string, onChange: () => void, signal?: AbortSignal): Promise<(() => void) | null>;
}

/** Longest an observer goes without re-reading, when nothing is pushed (an expiry, a lost message). */
const RECHECK_MS = 1000;
/** Re-read interval of a backend that cannot push changes at all. */
const POLL_MS = 100;

export class ElectionImpl extends EventEmitter implements Election {
  private term: Lease | null = null;
  /** A campaign() is in flight (one at a time per handle). */
  private campaigning = false;
  private readonly key: string;
  /** The Locks (a `#` field: a walk over the election's properties never reaches its backend). */
  readonly #host: ElectionHost;

  constructor(
    host: ElectionHost,
    readonly name: string,
    private readonly opts: ElectOptions | null,
  ) {
    super();
    this.#host = host;
    this.key = `election:${name}`;
  }

  static create(host: ElectionHost, name: unknown, options: unknown): ElectionImpl {
    checkTaggedKey(name, 'election:', 'election name');
    if (options === undefined) return new ElectionImpl(host, name as string, null);
    const o = checkOptions<ElectOptions>(options, ['value', 'ttl'], 'elect');
    if (typeof o.value !== 'string')
      throw new InvalidArgumentError('elect: value must be a string (what observers see)');
    checkString(o.value, 'elect: value', Infinity, true);
    if (o.ttl !== undefined) checkTtl(toMs(o.ttl, 'elect: ttl'), 'elect: a ttl');
    if (!host.backend.capabilities.value) {
      throw new InvalidArgumentError(`elect: the ${host.backend.name} backend cannot store a leader value`);
    }
    host.backend.checkValue?.(o.value, 'elect: value');
    return new ElectionImpl(host, name as string, o as ElectOptions);
  }

  get isLeader(): boolean {
    return this.term?.held ?? false;
  }

  async campaign(options?: { signal?: AbortSignal }): Promise<Term> {
    const o = checkOptions<{ signal: AbortSignal }>(options, ['signal'], 'campaign');
    const signal = checkSignal(o.signal, 'campaign');
    if (!this.opts) {
      throw new InvalidArgumentError(
        `campaign: a candidate needs a value — this handle of "${this.name}" only observes (elect(name, { value }))`,
      );
    }
    if (this.term?.held) return this.term;
    if (this.campaigning) {
      // a second queue place of the same candidate would wait behind its own term and take the
      // lock straight back at resign(), ahead of the others
      throw new InvalidArgumentError(
        `campaign: this handle of "${this.name}" is already campaigning; await that campaign (or abort its signal) first`,
      );
    }
    this.campaigning = true;
    try {
      return await this.campaignOnce(signal);
    } finally {
      this.campaigning = false;
    }
  }

  private async campaignOnce(signal: AbortSignal | undefined): Promise<Term> {
    const opts = this.opts!;
    for (;;) {
      let term: Lease;
      try {
        term = await this.#host.acquire(this.key, {
          value: opts.value,
          ttl: opts.ttl,
          renew: true, // a term is renewed while held, whatever the Locks' default
          wait: MAX_DURATION_MS,
          signal,
        });
      } catch (e) {
        if (signal?.aborted || (e as { code?: string }).code !== 'LEASEHOLD_LOCK_TIMEOUT') throw e;
        continue;
      }
      if (term.signal.aborted) {
        // lost before it could lead (a ttl shorter than the grant took): a listener added now
        // would never run, so neither 'elected' nor 'demoted' would be true; campaign again,
        // after a pause of one ttl (10 ms at least; 10 ms with the Locks' default ttl) rather than a
        // busy loop
        await sleep(Math.max(10, opts.ttl === undefined ? 0 : toMs(opts.ttl, 'ttl')), signal);
        continue;
      }
      this.term = term;
      term.signal.addEventListener(
        'abort',
        () => {
          // resign() lets go of the term before it releases it; any other release of a term
          // still held here came from elsewhere (close(), the term's own release())
          const resigned = this.term !== term;
          if (!resigned) this.term = null;
          const reason = term.signal.reason;
          this.emit(
            'demoted',
            reason instanceof Error && reason.name !== 'AbortError'
              ? reason
              : new NotLeaderError(
                  resigned
                    ? `resigned the leadership of "${this.name}"`
                    : `the term of "${this.name}" ended: its lease was released (close() or the term's release())`,
                ),
          );
        },
        { once: true },
      );
      try {
        this.emit('elected', term);
      } catch (e) {
        // an 'elected' listener threw: campaign() rejects with its error, so this candidate
        // steps down (as resign() does) rather than lead, renewed, with its caller unaware
        if (this.term === term) this.term = null;
        await term.release().catch(() => {});
        throw e;
      }
      return term;
    }
  }

  async resign(): Promise<void> {
    const term = this.term;
    if (!term?.held) throw new NotLeaderError(`not the leader of "${this.name}"`);
    this.term = null;
    await term.release();
  }

  async leader(): Promise<LeaderInfo | null> {
    const info = await this.#host.inspect(this.key);
    return info ? { value: info.value ?? '', fence: info.fence } : null;
  }

  async *observe(options?: { signal?: AbortSignal }): AsyncIterableIterator<LeaderInfo | null> {
    const o = checkOptions<{ signal: AbortSignal }>(options, ['signal'], 'observe');
    const signal = checkSignal(o.signal, 'observe') ?? new AbortController().signal;
    // a change flag set by pushes; the watch is in place before the first read, so nothing is lost
    let dirty: boolean;
    let wake: (() => void) | null = null;
    const poke = () => {
      dirty = true;
      wake?.();
    };
    const unwatch = await this.#host.watch(this.key, poke, signal).catch((e: unknown) => {
      if (signal.aborted) return null;
      throw e;
    });
    signal.addEventListener('abort', poke, { once: true });
    try {
      let last: string | undefined;
      while (!signal.aborted) {
        dirty = false;
        const info = await this.#host.inspect(this.key);
        const id = info ? `${info.fence}` : 'none';
        if (id !== last) {
          last = id;
          yield info ? { value: info.value ?? '', fence: info.fence } : null;
        }
        if (dirty || signal.aborted) continue;
        // an expiry pushes nothing: re-read just after the holder's time runs out
        const cap = unwatch ? RECHECK_MS : POLL_MS;
        const bound = info && info.remainingMs >= 0 ? Math.min(cap, info.remainingMs + 5) : cap;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, Math.max(1, bound));
          function done() {
            clearTimeout(timer);
            wake = null;
            resolve();
          }
          wake = done;
        });
      }
    } finally {
      signal.removeEventListener('abort', poke);
      unwatch?.();
    }
  }
}
