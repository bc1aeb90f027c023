/**
 * Push wake-ups for Redis waiters. One subscriber connection per backend (the adapter's), one
 * channel per waited key. A release publishes the SHA-1 digest of the queue head's token (never
 * the token), so only the waiter whose turn it is wakes up; the others sleep on. A waiter also
 * wakes at the holder's expiry (a crashed holder publishes nothing) and at its `maxMs` bound.
 */
import { createHash } from 'node:crypto';
import { sleep } from '../../wait.js';
import type { RedisAdapter } from './client.js';

interface Channel {
  ready: Promise<boolean>;
  /** Waiters by the digest of their token. */
  waiters: Map<string, Set<() => void>>;
  linger: NodeJS.Timeout | null;
}

/** What a refused waiter needs to wait well. */
interface Refusal {
  digest: string;
  /** Wake-ups addressed to `digest` when the refused attempt was sent. */
  wakes: number;
  /** The holder's remaining TTL, as the refusal reported it (0: unknown). */
  hintMs: number;
}

export const digestOf = (token: string): string => createHash('sha1').update(token).digest('hex');

export class Wakeups {
  private readonly channels = new Map<string, Channel>();
  /** Per key: this backend's refused waiter (the engine sends one acquire per key at a time). */
  private readonly refusals = new Map<string, Refusal>();
  /** Wake-ups received per digest, for this backend's waiters only. */
  private readonly wakes = new Map<string, number>();
  private closed = false;

  constructor(
    private readonly adapter: RedisAdapter,
    private readonly lingerMs: number,
  ) {}

  /**
   * Before an attempt is sent: listens for `digest` from now on (a wake-up may overtake the
   * attempt's reply) and returns how many wake-ups it has had.
   */
  before(digest: string): number {
    const n = this.wakes.get(digest);
    if (n !== undefined) return n;
    this.wakes.set(digest, 0);
    return 0;
  }

  refused(key: string, digest: string, wakes: number, hintMs: number): void {
    this.refusals.set(key, { digest, wakes, hintMs });
  }

  /** The waiter with `digest` on `key` got the lock, gave up, or failed. */
  forget(key: string, digest: string): void {
    if (this.refusals.get(key)?.digest === digest) this.refusals.delete(key);
    this.wakes.delete(digest);
  }

  private onMessage(ch: Channel, digest: string): void {
    const n = this.wakes.get(digest);
    if (n === undefined) return; // another process's turn
    this.wakes.set(digest, n + 1);
    const set = ch.waiters.get(digest);
    if (set) for (const w of [...set]) w();
  }

  async wait(key: string, channel: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted || this.closed) return;
    const ch = this.channels.get(channel);
    if (!ch) {
      const c: Channel = { ready: Promise.resolve(false), waiters: new Map(), linger: null };
      c.ready = this.adapter
        .subscribe(channel, (_, message) => this.onMessage(c, message))
        .then(
          () => true,
          () => false,
        );
      this.channels.set(channel, c);
      // newly subscribed: a release may have slipped by before the subscription existed, so
      // return at once and let the caller try again, now with push in place
      if (await c.ready) return;
      this.channels.delete(channel);
      return sleep(maxMs, signal);
    }
    if (ch.linger) {
      clearTimeout(ch.linger);
      ch.linger = null;
    }
    const r = this.refusals.get(key);
    if (r && (this.wakes.get(r.digest) ?? 0) !== r.wakes) return; // woken while we were trying
    const bound = Math.max(1, Math.min(maxMs, r && r.hintMs > 0 ? r.hintMs + 2 : maxMs));
    const digest = r?.digest ?? '';
    const c = ch;
    await new Promise<void>((resolve) => {
      let set = c.waiters.get(digest);
      if (!set) c.waiters.set(digest, (set = new Set()));
      const mine = set;
      const done = () => {
        clearTimeout(timer);
        mine.delete(done);
        if (mine.size === 0 && c.waiters.get(digest) === mine) c.waiters.delete(digest);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, bound);
      mine.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
    if (c.waiters.size === 0 && !c.linger && !this.closed) {
      c.linger = setTimeout(() => {
        if (c.waiters.size > 0 || this.channels.get(channel) !== c) return;
        this.channels.delete(channel);
        this.adapter.unsubscribe(channel).catch(() => {});
      }, this.lingerMs);
      c.linger.unref();
    }
  }

  close(): void {
    this.closed = true;
    for (const c of this.channels.values()) {
      if (c.linger) clearTimeout(c.linger);
      for (const set of [...c.waiters.values()]) for (const w of [...set]) w();
    }
    this.channels.clear();
  }
}
