/**
 * One-waiter wake-ups for Redlock (issue #16). Each backend subscribes once, on every node, to a
 * channel of its own (`leasehold:rlwake:<random>`). A queued attempt names that channel in the
 * key's waiter queue on every node it reaches (scored by this backend's arrival time for the key,
 * so every node orders the waiters alike), with a place that lapses after `PLACE_MS` unless the
 * waiter attempts again. A release drops lapsed places and publishes to the head's channel only,
 * on each node it reaches: one waiting backend hears it (up to once per node), nobody else. The
 * message is `<release id><key>`; the copies from several nodes carry the same release id, so a
 * waiter counts one wake-up per release and attempt: a copy that arrives after the waiter's
 * attempt was sent wakes it again (that node had not let go when the attempt reached it; the
 * attempt may have failed for it).
 *
 * Pub/sub stays a hint: a waiter also wakes at the holder's expiry (as the refusals reported it;
 * a crashed holder publishes nothing) and at least every `REFRESH_MS`, when it attempts again
 * (which refreshes its place, and finds a lock freed by a release whose message was lost or went
 * to a head that died). A dead head so delays the next grant by at most `REFRESH_MS`, and its own
 * place lapses within `PLACE_MS`.
 */
import { randomBytes } from 'node:crypto';
import { Sleep, sleep } from '../../wait.js';
import type { RedisAdapter } from '../redis/client.js';
import { KeyedWaits } from '../redis/waits.js';
import { ID_LEN } from './scripts.js';

/** How long a waiter's place outlives its last attempt. */
export const PLACE_MS = 3000;
/** The longest a waiter sleeps before it attempts again (which refreshes its place). */
export const REFRESH_MS = PLACE_MS / 3;
/**
 * A woken head's turn: a release cuts the head's place to this, so a head that does not attempt
 * in time (dead, its messages lost) stops holding up the waiters behind it (the next one gets the
 * lock at its next attempt, within REFRESH_MS); a live head that was late registers again with
 * its arrival and keeps its rank.
 */
export const TURN_MS = 500;
/** Release ids remembered per key to drop the other nodes' copies of one wake-up. */
const SEEN = 8;

export class Wakeups {
  /** This backend's channel: queue entries name it, releases publish to it. */
  readonly channel = `leasehold:rlwake:${randomBytes(12).toString('hex')}`;
  private readonly ready: (Promise<boolean> | null)[];
  private readonly subscribed: boolean[];
  /** Subscribed on enough nodes that every release reaches one of them. */
  private live = false;
  private readonly waits = new KeyedWaits();
  /** Waiters polling while too few nodes are subscribed: they return once enough are. */
  private readonly polling = new Set<LivePoll>();
  /** When this backend started waiting on a key (its place's score on every node). */
  private readonly arrivals = new Map<string, number>();
  private readonly seen = new Map<string, string[]>();
  private closed = false;
  /** Release ids: a random prefix per backend and a counter, ID_LEN hex characters in all. */
  private readonly idPrefix = randomBytes(ID_LEN / 4).toString('hex');
  private seq = 0;

  constructor(
    private readonly adapters: readonly RedisAdapter[],
    /** Nodes that must be subscribed (N − q + 1: every release reaches a majority). */
    private readonly need: number,
    private readonly nodeTimeoutMs: number,
    private readonly pollMs: number,
  ) {
    this.ready = adapters.map(() => null);
    this.subscribed = adapters.map(() => false);
  }

  /** A fresh release id (cheaper than random bytes per release; unique per backend and key). */
  nextId(): string {
    this.seq = (this.seq + 1) >>> 0;
    return this.idPrefix + this.seq.toString(16).padStart(ID_LEN / 2, '0');
  }

  /**
   * Before a queued attempt is sent: counts wake-ups for `key` from now on (one may overtake the
   * attempt's replies) and returns how many it has had, and this backend's arrival for the key.
   * `token` names the waiter: several (two Locks on this backend) may wait on one key, sharing its
   * place and wake-ups.
   */
  before(key: string, token: string): { wakes: number; arrival: number } {
    let arrival = this.arrivals.get(key);
    // the nodes' clock as this backend sees it, to the µs: waiters that arrive within one ms of
    // each other keep their order, and a host whose own clock is off does not jump the queue
    if (arrival === undefined) this.arrivals.set(key, (arrival = Math.round(this.nodeNow() * 1000) / 1000));
    // the copies of a release that reach us from here on wake this attempt's caller again: a node
    // that had not let go yet when the attempt arrived sends its copy only once it has
    this.seen.delete(key);
    return { wakes: this.waits.before(key, token), arrival };
  }

  /** Test hook: how far this host's wall clock is off (ms), as a host without NTP would be. */
  skewMs = 0;
  /** Median offset of the nodes' clocks from this host's (ms), from queued refusals; 0 until one. */
  private offsetMs = 0;

  /** This host's wall clock, ms (fractional). */
  wallNow(): number {
    return performance.timeOrigin + performance.now() + this.skewMs;
  }

  /** The nodes' time now, as estimated from this host's clock and the offset last observed. */
  private nodeNow(): number {
    return this.wallNow() + this.offsetMs;
  }

  /**
   * The node times that queued refusals carried, each with this host's wall clock when its attempt
   * was sent and when the reply came: the median offset (node − host) becomes the offset of later
   * arrivals. Every node gets the same arrival from one waiter, so they keep ordering the waiters
   * alike; aligned to the nodes' clock, arrivals from different hosts compare by when the nodes
   * saw them, whatever each host's own clock says.
   *
   * The node read its clock somewhere between our send and our reading of the reply, so the
   * offset lies between node − received and node − sent. We take node − sent, the largest: our
   * arrivals may then be stamped late by up to a round trip (we may fall behind a waiter that came
   * just after us), never early. The middle of the round trip was off by half of it either way, and
   * a reply read late (a busy event loop: 60 ms under two CPU hogs) made a host with a skewed clock
   * stamp its arrivals tens of ms early, ahead of a waiter that had been queued before it.
   */
  observe(samples: readonly { node: number; sent: number; received: number }[]): void {
    if (samples.length === 0) return;
    const offsets = samples.map((x) => x.node - x.sent).sort((a, b) => a - b);
    this.offsetMs = offsets[offsets.length >> 1]!;
  }

  /** A queued attempt was refused; messages carrying `ownId` (its own clean-ups) are no wake-up. */
  refused(key: string, wakes: number, hintMs: number, ownId: string): void {
    this.waits.refused(key, wakes, hintMs);
    this.saw(key, ownId);
  }

  /** Remembers a release id for `key`; false if it was already seen. */
  private saw(key: string, id: string): boolean {
    let seen = this.seen.get(key);
    if (!seen) this.seen.set(key, (seen = []));
    if (seen.includes(id)) return false;
    seen.push(id);
    if (seen.length > SEEN) seen.shift();
    return true;
  }

  /**
   * The waiter `token` on `key` got the lock, gave up, or failed. True when no other waiter of
   * this backend waits on `key` (its state is gone; its place on the nodes may go too); false
   * while another Locks' waiter still counts on the place and its wake-ups.
   */
  forget(key: string, token: string): boolean {
    if (!this.waits.forget(key, token)) return false;
    this.arrivals.delete(key);
    this.seen.delete(key);
    return true;
  }

  /** Whether a waiter of this backend waits on `key` (it keeps the backend's place there). */
  waiting(key: string): boolean {
    return this.arrivals.has(key);
  }

  private onMessage(message: string): void {
    const id = message.slice(0, ID_LEN);
    const key = message.slice(ID_LEN);
    if (!this.waits.waiting(key)) return; // nobody here waits on it any more
    if (!this.saw(key, id)) return; // another node's copy of the same release, or our own clean-up
    this.waits.wake(key);
  }

  /** Subscribes this backend's channel on every node not yet subscribed; true when live. */
  private async subscribe(): Promise<boolean> {
    const oks = await Promise.all(
      this.adapters.map((a, i) => {
        if (this.subscribed[i]) return true;
        const p = (this.ready[i] ??= a
          .subscribe(this.channel, (_, message) => this.onMessage(message))
          .then(
            () => {
              this.subscribed[i] = true;
              // a subscription that completes after its bound still counts, at once: the waiters
              // polling meanwhile return and attempt again, with push in place
              if (!this.live && this.subscribed.filter(Boolean).length >= this.need) {
                this.live = true;
                for (const w of [...this.polling]) w.done();
              }
              return true;
            },
            () => {
              this.ready[i] = null; // the next waiter tries again
              return false;
            },
          ));
        return Promise.race([p, sleep(this.nodeTimeoutMs).then(() => false)]);
      }),
    );
    this.live ||= oks.filter(Boolean).length >= this.need;
    return this.live;
  }

  async wait(key: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (signal.aborted || this.closed) return;
    maxMs = Math.max(1, Math.min(maxMs, REFRESH_MS));
    if (!this.live) {
      // a release before the subscription existed may have been missed: once subscribed, return
      // at once (the caller attempts again, with push in place); else poll
      if (await this.subscribe()) return;
      if (signal.aborted || this.closed) return;
      // poll; a subscription still under way that completes meanwhile ends the poll early
      return new Promise<void>((resolve) => {
        const w = new LivePoll(this.polling, signal, resolve);
        this.polling.add(w);
        w.start(Math.min(maxMs, this.pollMs));
      });
    }
    return this.waits.wait(key, signal, maxMs);
  }

  close(): void {
    this.closed = true;
    this.waits.close();
    for (const w of [...this.polling]) w.done();
  }
}

/** A waiter's poll while its backend is not subscribed on enough nodes. */
class LivePoll extends Sleep {
  constructor(
    private readonly set: Set<LivePoll>,
    signal: AbortSignal,
    resolve: () => void,
  ) {
    super(signal, resolve);
  }

  protected detach(): boolean {
    return this.set.delete(this);
  }
}
