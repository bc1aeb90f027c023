/**
 * Push wake-ups for Redis waiters. Each backend subscribes once, on its subscriber connection, to
 * a channel of its own (`leasehold:wake:<random>`), which its queue entries name. A release hands
 * the lock to the head of the queue and sends one message to that waiter's backend only:
 * `<sha1(token)><fence>|u<server µs>|<lock key>` (never the token). The waiter whose token it names
 * holds the lock from then on, with the short claim: `take` gives it the grant without a round
 * trip when the hand-over is known to follow the waiter's last refused attempt (its server time
 * is later than that refusal's), so the claim runs at least from that attempt's send time. Both
 * times are the server's µs: a hand-over within the millisecond of the refusal is still taken
 * (with ms, it cost a confirming round trip). A message of an older version (`|<server ms>|`,
 * no `u`) is compared in ms.
 * Pub/sub stays a hint: a waiter also wakes at the holder's expiry (as the refusal reported it; a
 * crashed holder publishes nothing) and at least every `refreshMs` (which refreshes its place in
 * the queue, and confirms a hand-over whose message was lost).
 */
import { randomBytes } from 'node:crypto';
import { digestHex } from '../../hash.js';
import { sleep } from '../../wait.js';
import type { RedisAdapter } from './client.js';
import { KeyedWaits } from './waits.js';

export class Wakeups {
  /** This backend's channel: queue entries name it, releases publish to it. */
  readonly channel = `leasehold:wake:${randomBytes(12).toString('hex')}`;
  private ready: Promise<boolean> | null = null;
  /** The subscription is in place: from now on no message to this channel is missed. */
  private live = false;
  private readonly waits = new KeyedWaits();
  private closed = false;
  /** Per lock key: the hand-over message received while this backend waits on it. */
  private readonly handed = new Map<string, { hash: string; fence: string; at: number; us: boolean }>();
  /**
   * Per lock key: this backend's last refused, queued attempt (send time, the server's time) and
   * the sha1 of its token, which a hand-over message names (hashed here, before the waiter sleeps,
   * not on the hand-over's path once it wakes).
   */
  private readonly refusals = new Map<string, { sentAt: number; serverUs: number; token: string; hash: string }>();

  constructor(
    private readonly adapter: RedisAdapter,
    /** The longest a queued waiter sleeps before it attempts again (which refreshes its place). */
    private readonly refreshMs: number,
  ) {}

  /**
   * Before a queued attempt is sent: counts wake-ups for `key` from now on (a wake-up may
   * overtake the attempt's reply) and returns how many it has had.
   */
  before(key: string, token?: string): number {
    return this.waits.before(key, token);
  }

  /**
   * A queued attempt of `token` sent at `sentAt` was refused; the server ran it at `serverUs` (its
   * clock, µs; NaN: unknown, and a hand-over is then confirmed by a round trip).
   */
  refused(key: string, wakes: number, hintMs: number, sentAt: number, serverUs: number, token: string): void {
    this.waits.refused(key, wakes, hintMs);
    const last = this.refusals.get(key);
    const hash = last?.token === token ? last.hash : digestHex('sha1', token);
    this.refusals.set(key, { sentAt, serverUs, token, hash });
  }

  /**
   * The waiter `token` on `key` got the lock, gave up, or failed. Another waiter of this backend
   * on the key (another Locks') keeps hearing its hand-overs.
   */
  forget(key: string, token?: string): void {
    if (this.waits.forget(key, token)) {
      this.handed.delete(key);
      this.refusals.delete(key);
    } else if (this.refusals.get(key)?.token === token) this.refusals.delete(key);
  }

  /**
   * The lock `key` was handed to `token` after the last refused attempt on record: its fence,
   * and a monotonic time before the hand-over (that attempt's send time), so the claim lasts at
   * least until `from` + the claim. Null: no such message, or one that may predate the refusal
   * (confirm with a round trip instead).
   */
  take(key: string, token: string): { fence: string; from: number } | null {
    const h = this.handed.get(key);
    if (!h) return null;
    this.handed.delete(key);
    const r = this.refusals.get(key);
    if (!r || !(h.at > (h.us ? r.serverUs : Math.floor(r.serverUs / 1000)))) return null;
    if (r.token !== token || r.hash !== h.hash) return null;
    return { fence: h.fence, from: r.sentAt };
  }

  /** `<sha1 40 hex><fence>|u<µs>|<lock key>` (`|<ms>|` from an older version), published by the hand-over (scripts.ts). */
  private message(m: string): void {
    const i = m.indexOf('|', 40);
    const j = i === -1 ? -1 : m.indexOf('|', i + 1);
    if (j === -1) return; // not a hand-over: nothing to do (a waiter still wakes by its bound)
    // the lock key as the script saw it: with the client's keyPrefix on it
    const kp = this.adapter.keyPrefix;
    const key = m.slice(j + 1 + (kp && m.startsWith(kp, j + 1) ? kp.length : 0));
    if (!this.waits.waiting(key)) return; // nobody here waits on it any more
    const us = m.charCodeAt(i + 1) === 117; // 'u'
    this.handed.set(key, {
      hash: m.slice(0, 40),
      fence: m.slice(40, i),
      at: Number(m.slice(us ? i + 2 : i + 1, j)),
      us,
    });
    this.waits.wake(key);
  }

  /** Subscribes this backend's channel once; true when in place. */
  private subscribe(): Promise<boolean> {
    this.ready ??= this.adapter
      .subscribe(this.channel, (_, message) => this.message(message))
      .then(
        () => (this.live = true),
        () => {
          this.ready = null; // the next waiter tries again
          return false;
        },
      );
    return this.ready;
  }

  wait(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted || this.closed) return Promise.resolve();
    maxMs = Math.max(1, Math.min(maxMs, this.refreshMs));
    // subscribed: the sleep's own promise, nothing wrapped around it (this is every wait's path)
    if (this.live) return this.waits.wait(key, signal, maxMs);
    return this.subscribeThenWait(signal, maxMs);
  }

  /**
   * Not subscribed yet, or still subscribing (slow on a cluster client, which connects first): a
   * hand-over sent before the subscription existed may have been missed, so wait for it and
   * return at once: the caller tries again (which confirms it), with push in place.
   */
  private async subscribeThenWait(signal: AbortSignal, maxMs: number): Promise<void> {
    if (await this.subscribe()) return;
    return sleep(maxMs, signal);
  }

  close(): void {
    this.closed = true;
    this.waits.close();
  }
}
