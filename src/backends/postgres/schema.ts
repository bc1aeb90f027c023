/**
 * The session backend's tables (session.ts): created on first use (unless `migrate: false`), and
 * the fence epoch each session connection read from them. Both are forgotten when a statement
 * finds the tables (or the sequence) gone: re-created on the next use, with a new epoch.
 */
import { schemaError, timed, type Conn, type Db } from './client.js';
import { readEpoch, type Epoch } from './connect.js';
import { createTables, tablesExist } from './ddl.js';
import type { Statements } from './sql.js';

export interface SchemaConfig {
  readonly db: Db;
  readonly sql: Statements;
  readonly quotedSchema: string;
  readonly timeoutMs: number;
  readonly autoMigrate: boolean;
}

export class Schema {
  private ready: Promise<void> | null = null;
  /** The schema check passed (attempts skip it without a microtask turn). */
  private passed = false;
  /** The fence epoch each session connection read (once: no connection outlives a reset). */
  private epochs = new WeakMap<Conn, Epoch>();

  constructor(private readonly config: SchemaConfig) {}

  /** The schema check passed. */
  get ok(): boolean {
    return this.passed;
  }

  /** Creates the tables on first use (unless `migrate: false`); cached, retried after failure. */
  ensure(): Promise<void> {
    if (!this.config.autoMigrate) {
      this.passed = true;
      return Promise.resolve();
    }
    if (!this.ready) {
      const { db, quotedSchema, timeoutMs } = this.config;
      const run = async () => {
        if (await tablesExist(db, quotedSchema)) return;
        await db.transaction((tx) => createTables(tx, quotedSchema));
      };
      const ready: Promise<void> = timed(run(), Math.max(timeoutMs, 30_000), 'migrate').then(
        () => {
          // not a check that a 42P01 since made stale (afterFailure started a new one)
          if (this.ready === ready) this.passed = true;
        },
        (e) => {
          if (this.ready === ready) this.ready = null;
          throw schemaError(e);
        },
      );
      this.ready = ready;
    }
    return this.ready;
  }

  /** The epoch already read on `conn` (no promise, no turn of the event loop), or undefined. */
  knownEpoch(conn: Conn): Epoch | undefined {
    return this.epochs.get(conn);
  }

  /** The fence epoch a session connection draws under (read, or recorded, once per connection). */
  async epochOf(conn: Conn): Promise<Epoch> {
    const known = this.epochs.get(conn);
    if (known) return known;
    const ep = await readEpoch(conn, this.config.sql, this.config.timeoutMs);
    this.epochs.set(conn, ep);
    return ep;
  }

  /** A grant on `conn` found the sequence re-created since its epoch was read: read it again. */
  forget(conn: Conn): void {
    this.epochs.delete(conn);
  }

  /** The tables (or the sequence) are gone: checked again on the next use, epochs read again. */
  gone(): void {
    this.ready = null;
    this.passed = false;
    this.epochs = new WeakMap();
  }
}
