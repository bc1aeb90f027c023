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
  constructor(private readonly adapter: RedisAdapter) {}

  /** Adds a listener; resolves true once the node confirmed the subscription, false if it failed. */
  add(channel: string, listener: () => void): Promise<boolean> {
    let ch = this.channels.get(channel);
    if (!ch) {
      const c: Channel = { listeners: new Set(), ready: Promise.resolve(false), linger: null };
      c.ready = this.adapter
        .subscribe(channel, () => {
          for (const l of [...c.listeners]) l();
        })
        .then(
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
      void this.adapter.unsubscribe(channel).catch(() => {});
    }, LINGER_MS);
    ch.linger.unref();
  }

  async close(): Promise<void> {
    for (const ch of this.channels.values()) if (ch.linger) clearTimeout(ch.linger);
    this.channels.clear();
    await this.adapter.close();
  }
}
