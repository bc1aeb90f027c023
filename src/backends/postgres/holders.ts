/**
 * Holder rows (`leasehold_holders`: fence, value and server pid of each grant) for what inspect,
 * list and watchers read. They are written off the grant's path: RECORD_MS after the grant, on a
 * pooled connection, and not at all for a lease already over by then (under contention a lease
 * often lives less than that).
 */
import { timed, type Conn, type Db } from './client.js';
import type { Statements } from './sql.js';

/** The holder row is written this long after the grant, unless the lease ended by then. */
const RECORD_MS = 5;

/** A lock this backend holds (`Held`, held.ts), as far as its holder row needs it. */
export interface HeldLock {
  readonly key: string;
  readonly lockKey: string;
  readonly fence: bigint;
  readonly conn: Conn;
  state: 'held' | 'releasing' | 'lost';
  /** The holder value its row is written with (null: none). */
  value: string | null;
}

export interface HolderRowsConfig {
  readonly db: Db;
  readonly sql: Statements;
  readonly channel: string;
  readonly timeoutMs: number;
  /** The server pid of a session connection. */
  readonly pidOf: (conn: Conn) => number | undefined;
  /** Keeps a promise for close() to wait on. */
  readonly track: (p: Promise<unknown>) => void;
}

export class HolderRows {
  /** Rows not yet written, by key. */
  private readonly pending = new Map<string, HeldLock>();
  /** Rows on their way. */
  private readonly writing = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly config: HolderRowsConfig) {}

  /** The row of a grant, written RECORD_MS from now unless `remove`d first. */
  add(held: HeldLock, value: string | null): void {
    this.pending.set(held.key, held);
    held.value = value;
    this.timer ??= setTimeout(() => {
      this.timer = null;
      this.config.track(this.flush());
    }, RECORD_MS);
  }

  /**
   * A lease that ended before its holder row was written: the row is not written, and with no
   * other row pending the timer is cleared. Node keeps its libuv timer armed for a cleared
   * timeout, so the process still wakes once at that time; what this saves is the flush's work,
   * not the wake-up (measured: no change in CPU).
   */
  remove(held: HeldLock): void {
    if (this.pending.get(held.key) !== held) return;
    this.pending.delete(held.key);
    if (this.pending.size === 0 && this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  /** Writes the pending rows now (only `key`'s, when given). */
  flush(key?: string): Promise<void> {
    const p = this.write(key);
    this.writing.add(p);
    const done = () => void this.writing.delete(p);
    p.then(done, done);
    return p;
  }

  /** Resolves once the rows of every grant so far are written. */
  async written(): Promise<void> {
    if (this.pending.size > 0) this.config.track(this.flush());
    await Promise.all([...this.writing]);
  }

  /** Drops what is pending (the backend closes). */
  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.pending.clear();
  }

  private async write(key?: string): Promise<void> {
    const { db, sql, channel, timeoutMs, pidOf } = this.config;
    const todo = key === undefined ? [...this.pending.values()] : [this.pending.get(key)].filter((h) => !!h);
    for (const h of todo) this.pending.delete(h.key);
    await Promise.all(
      todo
        .filter((h) => h.state === 'held')
        .map((h) => {
          const params = [h.key, h.fence.toString(), String(pidOf(h.conn)), h.value, h.lockKey, channel];
          return timed(db.query(sql.record, params), timeoutMs, 'holder row').catch(() => {});
        }),
    );
  }
}
