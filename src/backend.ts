/**
 * The driver contract. A backend is a small driver; the engine (src/locks.ts and friends) owns
 * validation, waiting, deadlines, renewal, signals, events and disposal.
 *
 * Keys reach a backend already namespaced (`<prefix>:<key>`) and validated. Tokens are secret:
 * a backend must never return one from `inspect`, and may store a digest instead.
 */

/** One atomic acquire attempt. */
export interface AcquireRequest {
  /** The holder's secret token (≥128 random bits, base64url). */
  readonly token: string;
  /** Lease time-to-live in milliseconds (an integer ≥ 1). */
  readonly ttlMs: number;
  /**
   * When true the caller will wait if the attempt fails: a fair backend records the caller in
   * the key's arrival queue (an entry that expires after `ttlMs` unless the caller tries again),
   * and grants the lock only to the head of that queue. When false the attempt never queues.
   */
  readonly queue?: boolean;
  /** Holder value (election candidates), stored beside the lock when `capabilities.value`. */
  readonly value?: string;
}

export interface Grant {
  /** Fencing token: strictly greater than every earlier grant's fence for this key. */
  readonly fence: bigint;
}

export interface ExtendItem {
  readonly key: string;
  readonly token: string;
  readonly ttlMs: number;
}

export interface LockInfo {
  readonly key: string;
  readonly fence: bigint;
  /** Milliseconds left on the stored lease, by the server's clock (-1: no expiry known). */
  readonly remainingMs: number;
  readonly value?: string;
}

export interface BackendCapabilities {
  /** Waiters are woken by a push (pub/sub, NOTIFY, watch, in-process event), not polling. */
  readonly push: boolean;
  /** Acquire honours `queue`: the lock goes to waiters in arrival order. */
  readonly fair: boolean;
  /** Stores a holder `value` (needed by election). */
  readonly value: boolean;
  /** Has a result store (needed by `locks.idempotent`). */
  readonly results: boolean;
  /**
   * Liveness is a session (PG connection, ZK session, etcd lease) rather than a per-key TTL:
   * the TTL is the client's validity, renewal is the liveness probe.
   */
  readonly session: boolean;
}

/**
 * Optional result store for idempotency keys. Results live beside the lock that guards them:
 * `put` stores only while `token` still holds `lockKey` (a stale holder cannot write a result).
 */
export interface ResultStore {
  get(lockKey: string): Promise<string | null>;
  put(lockKey: string, token: string, value: string, ttlMs: number): Promise<boolean>;
}

export type LostCallback = (key: string, token: string, cause: unknown) => void;

export interface Backend {
  readonly name: string;
  readonly capabilities: BackendCapabilities;
  /** One atomic attempt. Resolves null if the lock is held (or not this caller's turn). */
  acquire(key: string, request: AcquireRequest): Promise<Grant | null>;
  /**
   * Token-checked extension of many leases in one round trip. Resolves one boolean per item:
   * false means the lease is no longer this token's (expired, deleted, overwritten).
   */
  extend(items: readonly ExtendItem[]): Promise<boolean[]>;
  /** Token-checked release; wakes waiters. False if the lock was not (or no longer) this token's. */
  release(key: string, token: string): Promise<boolean>;
  /** Removes `token` from the key's arrival queue (a waiter that gave up). Fair backends only. */
  leave?(key: string, token: string): Promise<void>;
  /**
   * Resolves when the key may have changed (released, expired) or after `maxMs`, whichever is
   * first; resolves early (never rejects) when `signal` aborts.
   */
  waitForChange?(key: string, signal: AbortSignal, maxMs: number): Promise<void>;
  inspect?(key: string): Promise<LockInfo | null>;
  /** Session backends report a lost session for the leases it held. */
  onLost?(cb: LostCallback): void;
  results?: ResultStore;
  /** Releases what the backend itself owns (subscriber connections, timers); never user clients. */
  close(): Promise<void>;
}
