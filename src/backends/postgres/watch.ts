/**
 * `watch(key)` of the session backend (session.ts): observers of a key get a call on each grant
 * and release (NOTIFY) and on a reconnect. A watched key is marked attended in its holder row, so
 * that its grants and releases NOTIFY (releases of unattended keys send nothing); the mark is
 * refreshed while anyone watches.
 */
import { timed, type Db } from './client.js';
import type { Notifier } from './notify.js';
import type { Statements } from './sql.js';

/** How long a watch marks its key attended (refreshed at half of it while watched). */
const ATTEND_MS = 600_000;

export class Watches {
  /** Watched keys (count of watches each), re-marked attended every ATTEND_MS / 2. */
  private readonly watched = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly db: Db,
    private readonly sql: Statements,
    private readonly notifier: Notifier,
    private readonly timeoutMs: number,
    private readonly track: (p: Promise<unknown>) => void,
  ) {}

  /** Starts watching `key` (its key checked by the caller); resolves to the function that stops. */
  async watch(key: string, onChange: () => void): Promise<() => void> {
    const stop = await this.notifier.watch(this.sql.lockKey(key), onChange);
    this.watched.set(key, (this.watched.get(key) ?? 0) + 1);
    await this.attend(key);
    this.timer ??= setInterval(() => {
      for (const k of this.watched.keys()) this.track(this.attend(k).catch(() => {}));
    }, ATTEND_MS / 2).unref();
    let stopped = false;
    return () => {
      if (stopped) return;
      stopped = true;
      stop();
      const n = (this.watched.get(key) ?? 1) - 1;
      if (n > 0) this.watched.set(key, n);
      else this.watched.delete(key);
      if (this.watched.size === 0) this.stopTimer();
    };
  }

  /** Stops refreshing (the backend closes; the notifier ends the watches themselves). */
  close(): void {
    this.watched.clear();
    this.stopTimer();
  }

  private stopTimer(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Marks a watched key attended, so that its grants and releases NOTIFY (refreshed while watched). */
  private async attend(key: string): Promise<void> {
    const params = [key, this.sql.lockKey(key), String(ATTEND_MS)];
    await timed(this.db.query(this.sql.attend, params), this.timeoutMs, 'watch');
  }
}
