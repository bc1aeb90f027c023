/**
 * `watch(key)` for Redis: every grant and every release of a key publishes on the key's
 * `{k}:changed` channel (a hint with no token in it), and watchers of one backend share one
 * SUBSCRIBE per channel on the adapter's subscriber connection. A channel nobody watches any more
 * lingers a moment before UNSUBSCRIBE, so an observer that re-watches does not pay a round each time.
 */
import { ClosedError } from '../../errors.js';
import type { RedisAdapter } from './client.js';

interface Channel {
  readonly listeners: Set<() => void>;
  ready: Promise<void>;
  linger: NodeJS.Timeout | null;
}

export class Watchers {
  private readonly channels = new Map<string, Channel>();
  /**
   * Channels whose UNSUBSCRIBE is on its way: a new watch subscribes once it is done. node-redis
   * drops a channel's listeners when the UNSUBSCRIBE's reply comes, the ones a SUBSCRIBE added
   * in the meantime included (that SUBSCRIBE it does not even send: the channel still looks
   * subscribed), so such a watch would resolve and hear nothing.
   */
  private readonly leaving = new Map<string, Promise<void>>();
  /** After close(): no new subscription (it would open a subscriber connection nobody closes). */
  private closed = false;

  constructor(
    private readonly adapter: RedisAdapter,
    private readonly lingerMs: number,
  ) {}

  /** Resolves once the server confirmed the subscription (rejects if it failed); then `off`. */
  async watch(channel: string, onChange: () => void): Promise<() => void> {
    if (this.closed) throw new ClosedError('redis: backend closed');
    let ch = this.channels.get(channel);
    if (!ch) {
      const c: Channel = { listeners: new Set(), ready: Promise.resolve(), linger: null };
      const listener = () => {
        for (const l of [...c.listeners]) l();
      };
      const left = this.leaving.get(channel);
      c.ready = left
        ? left.then(() => {
            if (this.closed) throw new ClosedError('redis: backend closed');
            return this.adapter.subscribe(channel, listener);
          })
        : this.adapter.subscribe(channel, listener);
      c.ready.catch(() => {
        if (this.channels.get(channel) === c) this.channels.delete(channel); // the next watch retries
      });
      this.channels.set(channel, c);
      ch = c;
    }
    if (ch.linger) clearTimeout(ch.linger);
    ch.linger = null;
    // one entry per watch, even for the same function twice
    const mine = () => onChange();
    ch.listeners.add(mine);
    try {
      await ch.ready;
    } catch (e) {
      ch.listeners.delete(mine);
      throw e;
    }
    const c = ch;
    return () => this.remove(channel, c, mine);
  }

  private remove(channel: string, ch: Channel, listener: () => void): void {
    if (!ch.listeners.delete(listener) || ch.listeners.size > 0) return;
    ch.linger = setTimeout(() => {
      if (this.channels.get(channel) !== ch || ch.listeners.size > 0) return;
      this.channels.delete(channel);
      const done: Promise<void> = this.adapter
        .unsubscribe(channel)
        .catch(() => {})
        .then(() => {
          if (this.leaving.get(channel) === done) this.leaving.delete(channel);
        });
      this.leaving.set(channel, done);
    }, this.lingerMs);
    ch.linger.unref();
  }

  close(): void {
    this.closed = true;
    for (const ch of this.channels.values()) if (ch.linger) clearTimeout(ch.linger);
    this.channels.clear();
  }
}
