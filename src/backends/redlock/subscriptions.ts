/**
 * Reference-counted pub/sub on one node: many waiters of one backend share one SUBSCRIBE per
 * channel (the adapter keeps one listener per channel, so it must not be called twice). A
 * channel nobody listens to lingers a moment before UNSUBSCRIBE, so a waiter that retries and
 * waits again does not pay a subscribe round each time.
 */
import type { RedisAdapter } from '../redis/client.js';

const LINGER_MS = 2_000;

interface Channel {
  readonly listeners: Set<() => void>;
  ready: Promise<boolean>;
  linger: NodeJS.Timeout | null;
}

export class Subscriptions {
  private readonly channels = new Map<string, Channel>();
  /**
   * Channels whose UNSUBSCRIBE is on its way: a new listener subscribes once it is done.
   * node-redis drops a channel's listeners when the UNSUBSCRIBE's reply comes, the ones a
   * SUBSCRIBE added meanwhile included (that SUBSCRIBE it does not even send: the channel still
   * looks subscribed), so such a watch would resolve and hear nothing.
   */
  private readonly leaving = new Map<string, Promise<void>>();
  constructor(private readonly adapter: RedisAdapter) {}

  /** Adds a listener; resolves true once the node confirmed the subscription, false if it failed. */
  add(channel: string, listener: () => void): Promise<boolean> {
    let ch = this.channels.get(channel);
    if (!ch) {
      const c: Channel = { listeners: new Set(), ready: Promise.resolve(false), linger: null };
      const listener = () => {
        for (const l of [...c.listeners]) l();
      };
      const left = this.leaving.get(channel);
      c.ready = (
        left ? left.then(() => this.adapter.subscribe(channel, listener)) : this.adapter.subscribe(channel, listener)
      ).then(
        () => true,
        () => {
          if (this.channels.get(channel) === c) this.channels.delete(channel); // the next waiter retries
          return false;
        },
      );
      this.channels.set(channel, c);
      ch = c;
    }
    if (ch.linger) clearTimeout(ch.linger);
    ch.linger = null;
    ch.listeners.add(listener);
    return ch.ready;
  }

  remove(channel: string, listener: () => void): void {
    const ch = this.channels.get(channel);
    if (!ch || !ch.listeners.delete(listener) || ch.listeners.size > 0) return;
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
    }, LINGER_MS);
    ch.linger.unref();
  }

  async close(): Promise<void> {
    for (const ch of this.channels.values()) if (ch.linger) clearTimeout(ch.linger);
    this.channels.clear();
    await this.adapter.close();
  }
}
