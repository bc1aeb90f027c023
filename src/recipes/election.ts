/**
 * Leader election over any backend that stores a holder value: a campaign is an acquire that
 * waits as long as it takes; the term is the lease (renewed, fenced, signalled on loss).
 */
import { EventEmitter } from 'node:events';
import type { Backend } from '../backend.js';
import { type Duration } from '../duration.js';
import { InvalidArgumentError, NotLeaderError } from '../errors.js';
import type { Lease } from '../lease.js';
import { checkKey, checkOptions, checkSignal } from '../validate.js';
import { MAX_DURATION_MS } from '../duration.js';
import { sleep } from '../wait.js';

/** A term of leadership: a lease on the election's key. */
export type Term = Lease;

export interface ElectOptions {
  /** What observers see as the leader (e.g. host:port). */
  value: string;
  /** Lease TTL of a term (default: the Locks' ttl). */
  ttl?: Duration;
}

export interface LeaderInfo {
  value: string;
  fence: bigint;
}

export interface Election extends EventEmitter {
  readonly name: string;
  readonly isLeader: boolean;
  /** Resolves with the term once this candidate leads; waits as long as it takes. */
  campaign(options?: { signal?: AbortSignal }): Promise<Term>;
  /** Gives leadership up (releases the term). Throws NotLeaderError if not leading. */
  resign(): Promise<void>;
  /** The current leader, or null. */
  leader(): Promise<LeaderInfo | null>;
  /**
   * The current leader (or null) first, then each change, until `signal` aborts. Pull-based:
   * changes that happen while the consumer is busy are coalesced into the latest state.
   */
  observe(options?: { signal?: AbortSignal }): AsyncIterableIterator<LeaderInfo | null>;
}

/** What an election needs from its Locks. */
export interface ElectionHost {
  readonly backend: Backend;
  acquire(key: string, options: { value: string; ttl?: Duration; wait: number; signal?: AbortSignal }): Promise<Lease>;
  inspect(key: string): Promise<{ fence: bigint; remainingMs: number; value?: string } | null>;
  fullKey(key: string): string;
}

export class ElectionImpl extends EventEmitter implements Election {
  private term: Lease | null = null;
  private readonly key: string;

  constructor(
    private readonly host: ElectionHost,
    readonly name: string,
    private readonly opts: ElectOptions,
  ) {
    super();
    this.key = `election:${name}`;
  }

  static create(host: ElectionHost, name: unknown, options: unknown): ElectionImpl {
    checkKey(name, 'election name');
    const o = checkOptions<ElectOptions>(options, ['value', 'ttl'], 'elect');
    if (typeof o.value !== 'string')
      throw new InvalidArgumentError('elect: value must be a string (what observers see)');
    if (!host.backend.capabilities.value) {
      throw new InvalidArgumentError(`elect: the ${host.backend.name} backend cannot store a leader value`);
    }
    return new ElectionImpl(host, name as string, o as ElectOptions);
  }

  get isLeader(): boolean {
    return this.term?.held ?? false;
  }

  async campaign(options?: { signal?: AbortSignal }): Promise<Term> {
    const o = checkOptions<{ signal: AbortSignal }>(options, ['signal'], 'campaign');
    const signal = checkSignal(o.signal, 'campaign');
    if (this.term?.held) return this.term;
    for (;;) {
      try {
        const term = await this.host.acquire(this.key, {
          value: this.opts.value,
          ttl: this.opts.ttl,
          wait: MAX_DURATION_MS,
          signal,
        });
        this.term = term;
        term.signal.addEventListener(
          'abort',
          () => {
            if (this.term === term) this.term = null;
            this.emit('demoted', term.signal.reason);
          },
          { once: true },
        );
        this.emit('elected', term);
        return term;
      } catch (e) {
        if (signal?.aborted || (e as { code?: string }).code !== 'LEASEHOLD_LOCK_TIMEOUT') throw e;
      }
    }
  }

  async resign(): Promise<void> {
    const term = this.term;
    if (!term?.held) throw new NotLeaderError(`not the leader of "${this.name}"`);
    this.term = null;
    await term.release();
  }

  async leader(): Promise<LeaderInfo | null> {
    const info = await this.host.inspect(this.key);
    return info ? { value: info.value ?? '', fence: info.fence } : null;
  }

  async *observe(options?: { signal?: AbortSignal }): AsyncIterableIterator<LeaderInfo | null> {
    const o = checkOptions<{ signal: AbortSignal }>(options, ['signal'], 'observe');
    const signal = checkSignal(o.signal, 'observe') ?? new AbortController().signal;
    const backend = this.host.backend;
    let last: string | undefined;
    while (!signal.aborted) {
      const info = await this.host.inspect(this.key);
      const id = info ? `${info.fence}` : 'none';
      if (id !== last) {
        last = id;
        yield info ? { value: info.value ?? '', fence: info.fence } : null;
      }
      // woken by a release; a new leader or an expiry is seen at the latest after 1s
      const bound = info && info.remainingMs > 0 ? Math.min(1000, info.remainingMs + 5) : 1000;
      if (backend.waitForChange) await backend.waitForChange(this.host.fullKey(this.key), signal, bound);
      else await sleep(Math.min(bound, 250), signal);
    }
  }
}
