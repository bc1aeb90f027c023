/**
 * Push wake-ups for waiters: one LISTEN connection per backend on one channel; every release
 * (session mode) and every COMMIT of an `xactLock` transaction sends `pg_notify(channel,
 * advisoryKey)`. Postgres delivers a notification at commit, after the releasing statement or
 * transaction let go of the lock, so a woken waiter's next attempt can succeed.
 *
 * The missed-wake-up window (a release between a failed attempt and `waitForChange`) is closed
 * with a sequence number: `mark()` is read before each attempt, and a waiter whose key was
 * notified after its attempt started returns at once. An attempt that started before the
 * subscription was live is answered with one spurious wake-up once it is.
 */
import type { Db, Subscription } from './client.js';
import { remember } from './connect.js';

type Wake = () => void;

export class Notifier {
  private seq = 0;
  private live = false;
  private closed = false;
  private sub: Subscription | null = null;
  private starting: Promise<void> | null = null;
  /** advisory key → seq of the last notification for it (bounded, oldest dropped). */
  private readonly notified = new Map<string, number>();
  /** namespaced key → seq at the start of its last failed, queued attempt (bounded). */
  private readonly failed = new Map<string, number>();
  private readonly waiters = new Map<string, Set<Wake>>();
  private readonly onLive = new Set<Wake>();
  /** advisory key → watchers (grants and releases, until unwatched). */
  private readonly watchers = new Map<string, Set<Wake>>();
  /** Watches waiting for the subscription to be live. */
  private readonly watchPending = new Set<{ ok: () => void; fail: (e: unknown) => void }>();

  constructor(
    private readonly db: Db,
    private readonly channel: string,
    private readonly timeoutMs: number,
  ) {}

  /** Read before an attempt: the sequence number, or -1 when not subscribed yet. */
  mark(): number {
    return this.live ? this.seq : -1;
  }

  /** NOTIFY messages received (diagnostics: waiters in the server's queue need none). */
  messages = 0;

  /** Records a failed attempt of a caller that will wait; subscribes if not yet (when `start`). */
  failedAttempt(key: string, mark: number, start = true): void {
    remember(this.failed, key, mark);
    if (start) this.start();
  }

  /** Resolves on a notification for `lockKey`, after `maxMs`, or when `signal` aborts. Never rejects. */
  wait(key: string, lockKey: string, signal: AbortSignal, maxMs: number): Promise<void> {
    const since = this.failed.get(key);
    this.failed.delete(key);
    if (this.closed || signal.aborted || maxMs <= 0) return Promise.resolve();
    if (this.live) {
      if (since === -1) return Promise.resolve(); // the attempt predates the subscription
      if (since !== undefined && (this.notified.get(lockKey) ?? -1) > since) return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      let set = this.waiters.get(lockKey);
      if (!set) this.waiters.set(lockKey, (set = new Set()));
      const waiters = set;
      const finish = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', finish);
        waiters.delete(finish);
        if (waiters.size === 0 && this.waiters.get(lockKey) === waiters) this.waiters.delete(lockKey);
        this.onLive.delete(finish);
        resolve();
      };
      const timer = setTimeout(finish, Math.min(maxMs, 2_147_483_647));
      signal.addEventListener('abort', finish, { once: true });
      waiters.add(finish);
      if (!this.live) {
        this.onLive.add(finish); // a release may have gone unseen: wake once we can see them
        this.start();
      }
    });
  }

  /**
   * Calls `cb` on each grant and release of `lockKey` and on every reconnect, until the returned
   * function is called. Resolves once the subscription is live (nothing after it is missed).
   */
  async watch(lockKey: string, cb: Wake): Promise<() => void> {
    let set = this.watchers.get(lockKey);
    if (!set) this.watchers.set(lockKey, (set = new Set()));
    const watchers = set;
    const entry = () => cb();
    watchers.add(entry);
    const stop = () => {
      watchers.delete(entry);
      if (watchers.size === 0 && this.watchers.get(lockKey) === watchers) this.watchers.delete(lockKey);
    };
    if (!this.live) {
      try {
        await new Promise<void>((ok, fail) => {
          const w = {
            ok: () => (this.watchPending.delete(w), ok()),
            fail: (e: unknown) => (this.watchPending.delete(w), fail(e)),
          };
          this.watchPending.add(w);
          this.start();
        });
      } catch (e) {
        stop();
        throw e;
      }
    }
    return stop;
  }

  /** Subscribes in the background; failures leave waiters on their timers (polling). */
  start(): void {
    if (this.live || this.starting || this.closed) return;
    this.starting = this.db
      .listen(
        this.channel,
        {
          message: (payload) => this.message(payload),
          reset: (down) => this.reset(down),
        },
        this.timeoutMs,
      )
      .then(
        (sub) => {
          this.starting = null;
          this.sub = sub; // if closed meanwhile, close() (awaiting `starting`) unsubscribes
          if (this.closed) return;
          this.live = true;
          const wake = [...this.onLive];
          this.onLive.clear();
          for (const w of wake) w();
          for (const w of [...this.watchPending]) w.ok();
        },
        (e: unknown) => {
          this.starting = null;
          for (const w of [...this.watchPending]) w.fail(e);
        },
      );
  }

  private message(payload: string): void {
    this.messages++;
    if (payload.startsWith('+')) {
      // a grant: only watchers care (waiters wait for releases)
      const set = this.watchers.get(payload.slice(1));
      if (set) for (const w of [...set]) w();
      return;
    }
    const watching = this.watchers.get(payload);
    if (watching) for (const w of [...watching]) w();
    this.seq++;
    remember(this.notified, payload, this.seq);
    const set = this.waiters.get(payload);
    if (set) for (const w of [...set]) w();
  }

  /** The subscription reconnected (messages may be lost) or went down: wake everyone. */
  private reset(down: boolean): void {
    this.seq++;
    this.notified.clear();
    if (down) {
      this.live = false;
      this.sub = null;
    }
    // Pending failed attempts can no longer trust the sequence: their waits return at once.
    for (const k of this.failed.keys()) this.failed.set(k, -1);
    this.wakeAll();
    if (down && this.watchers.size > 0) this.start(); // watchers stay subscribed
  }

  private wakeAll(): void {
    const all = [...this.waiters.values(), ...this.watchers.values()].flatMap((s) => [...s]);
    for (const w of all) w();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.live = false;
    this.wakeAll();
    this.watchers.clear();
    for (const w of [...this.watchPending]) w.fail(new Error('postgres: backend closed'));
    for (const w of [...this.onLive]) w();
    if (this.starting) await this.starting;
    const sub = this.sub;
    this.sub = null;
    if (sub) await sub.close();
  }
}
