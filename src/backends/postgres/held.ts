/**
 * A lock the session backend holds (`Held`: its token, expiry timer and validity, beside what its
 * holder row needs), and what the held locks (leases.ts, `Leases`) need from their backend
 * (session.ts): `LeasesHost`.
 */
import type { Conn, Db } from './client.js';
import type { Dedicated } from './connect.js';
import type { HeldLock, HolderRows } from './holders.js';
import type { Keepalives } from './keepalive.js';
import type { ServerQueue } from './queue.js';
import type { Statements } from './sql.js';

/** A lock this backend holds (on its session connection, or on the waiter connection it waited on). */
export interface Held extends HeldLock {
  readonly token: string;
  /** Releases the lock when its validity runs out without an extension (or re-checks it, `refresh`). */
  timer: NodeJS.Timeout | null;
  /** The validity the TTL gives (monotonic ms), and that TTL. */
  until: number;
  ttlMs: number;
}

/** A lock just granted on `conn`: held, its expiry not armed yet. */
export function newHeld(key: string, token: string, lockKey: string, fence: bigint, conn: Conn): Held {
  return { key, token, lockKey, fence, conn, state: 'held', timer: null, value: null, until: 0, ttlMs: 0 };
}

/** What the held locks need from their backend. */
export interface LeasesHost {
  readonly db: Db;
  readonly sql: Statements;
  readonly channel: string;
  readonly timeoutMs: number;
  /** The server pid of each session connection, as the server says (not the client's key data). */
  readonly pids: WeakMap<Conn, number>;
  /** The dedicated connection (the session that holds this backend's locks). */
  readonly dedicated: Dedicated;
  /** Waits in the server's lock queue (and the waiter connections a lock may be on). */
  readonly queue: ServerQueue;
  /** Holder rows (for inspect, list and watchers), written off the grant's path. */
  readonly rows: HolderRows;
  /** The TCP keepalive idle time of each connection (how long the server keeps a silent one). */
  readonly keepalives: Keepalives;
  closed(): boolean;
  /** A lease of `key` began: the runExclusive window its last attempt met is forgotten. */
  windowOver(key: string): void;
  /** A statement found the tables (or the sequence, or the schema) gone (42P01, 3F000). */
  schemaGone(): void;
  maybeIdle(): void;
  track(p: Promise<unknown>): void;
}
