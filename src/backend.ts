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
  /**
   * The engine renews this lease until it is released. A backend with `renewSessions` may then
   * hang the lease off a session of its own (its Grant names it) instead of giving it its own
   * expiry; a lease that is not renewed always keeps its own expiry (`ttlMs`, even after a crash).
   */
  readonly renew?: boolean;
}

export interface Grant {
  /** Fencing token: strictly greater than every earlier grant's fence for this key. */
  readonly fence: bigint;
  /**
   * The backend session this lease hangs off (only for a request with `renew`, from a backend
   * with `renewSessions`): the lease is held while that session lives, and the engine renews the
   * session (one call for all of its leases) rather than the lease. Every lease of one session
   * has the same TTL; the session's expiry is at least each grant's `ttlMs` after it was sent.
   */
  readonly session?: string;
  /**
   * Monotonic time (`performance.now()`) before which the server's hold of this grant cannot
   * lapse, when that is sooner than the request's TTL counted from its send time: a lock handed
   * over by a release with a short claim, taken without a round trip. The engine renews such a
   * lease (only with `renew`) before half of what is left has passed; that renewal gives it its TTL.
   */
  readonly expiresAt?: number;
}

/** What renewing one session found. */
export interface SessionRenewal {
  /** False: the session lapsed (or was ended); every lease hanging off it is lost. */
  readonly ok: boolean;
  /** Tokens of this session's leases that are no longer held although the session lives (broken by an admin). */
  readonly lost: readonly string[];
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
   * The clock-drift allowance (ms) this backend's own validity rule takes off a TTL, when it may
   * be larger than the engine's `driftMs` (Redlock's `driftFactor` / `driftMs` options): a lease
   * then counts as held for `ttl − elapsed − max(both)` only, on its grant and every renewal.
   */
  driftMs?(ttlMs: number): number;
  /**
   * Token-checked extension of many leases in one round trip. Resolves one entry per item: true
   * (extended); false: the lease is no longer this token's (expired, deleted, overwritten); an
   * Error: that item's renewal failed, its outcome unknown as for a rejection, while others of the
   * call went through (a Redis Cluster slot stuck mid-migration fails its own leases only). A call
   * in which no item went through rejects instead (so a single item never resolves an Error).
   */
  extend(items: readonly ExtendItem[]): Promise<(boolean | Error)[]>;
  /**
   * Renews sessions named by grants (`Grant.session`), all in one round trip: each to its own
   * TTL. A session that is not renewed lapses, and its leases are free. A lease that is later
   * `extend`ed by itself leaves its session (it gets its own expiry).
   */
  renewSessions?(sessions: readonly string[]): Promise<SessionRenewal[]>;
  /** Token-checked release; wakes waiters. False if the lock was not (or no longer) this token's. */
  release(key: string, token: string): Promise<boolean>;
  /**
   * Keeps a held lock for `ms` more after its holder is done (runExclusive's `lockAtLeastFor`),
   * in stored state with an expiry that outlives the holder's process and session, and lets go
   * of the live lock. For session backends, whose locks end with the session; others extend.
   * False if the lock was no longer `token`'s. The engine then forgets the lease.
   */
  keep?(key: string, token: string, ms: number): Promise<boolean>;
  /** Removes `token` from the key's arrival queue (a waiter that gave up). Fair backends only. */
  leave?(key: string, token: string): Promise<void>;
  /**
   * Resolves when the key may have changed (released, expired) or after `maxMs`, whichever is
   * first; resolves early (never rejects) when `signal` aborts.
   */
  waitForChange?(key: string, signal: AbortSignal, maxMs: number): Promise<void>;
  /**
   * After a wait: the grant a release already handed to this waiter (`request.token`) and told
   * it of (a hand-over message), when the backend knows it holds without a round trip; null
   * otherwise (the engine then makes an attempt, which confirms a hand-over it could not take
   * here). No I/O, never throws. The engine calls it in place of an attempt after a pause.
   */
  handedOver?(key: string, request: AcquireRequest): Grant | null;
  inspect?(key: string): Promise<LockInfo | null>;
  /**
   * The locks held under a full-key prefix (e.g. `leasehold:` or `leasehold:order:`), each as
   * `inspect` would show it (never a token). For `leasehold status`; order is unspecified.
   */
  list?(prefix: string): AsyncIterable<LockInfo>;
  /**
   * Calls `onChange` whenever the holder of `key` may have changed: granted, released, taken
   * over, or lost with its session. Push only (pub/sub, NOTIFY, watch, in-process event); an
   * expiry with no event is found by the caller's own bounded re-check. Resolves once the watch
   * is in place (so no change after it resolves is missed); the returned function ends it.
   * Used by `Election.observe()`; spurious calls are allowed, missed ones are not.
   */
  watch?(key: string, onChange: () => void): Promise<() => void>;
  /**
   * Administrative break (`leasehold release --force`): frees `key` whoever holds it and wakes
   * its waiters. Resolves what it broke, as `inspect` showed it, or null when nothing was held.
   * The holder finds out at its next renewal (its lease is lost); fences are never reissued.
   */
  forceRelease?(key: string): Promise<LockInfo | null>;
  /**
   * Monotonic time (`performance.now()`) past which this process can no longer vouch, without a
   * call, that `token` still holds `key`: a session backend's last confirmed session expiry (for
   * etcd, when the last confirmed keep-alive of its lease was sent, plus the lease's TTL, minus a
   * margin). Undefined when the backend knows no such bound (or not the lease). The engine never
   * counts a lease valid past it — `held`, `remaining()`, `signal` and the renewal deadline —
   * whatever the lease's own ttl, so a paused process never reads a lease held that its session
   * no longer guarantees. No I/O, never throws, cheap (read on every `held`).
   */
  validUntil?(key: string, token: string): number | undefined;
  /** Session backends report a lost session for the leases it held, and a lock they freed on their own. */
  onLost?(cb: LostCallback): void;
  results?: ResultStore;
  /**
   * Checks a holder value this backend's store cannot keep as given (Postgres text holds no NUL),
   * throwing InvalidArgumentError with `what` in its message. No I/O. The engine calls it where it
   * checks its own arguments (acquire, tryAcquire, withLock, runExclusive, elect), before any I/O.
   */
  checkValue?(value: string, what: string): void;
  /**
   * close() is coming: the engine calls this first, then releases what it holds, then calls
   * `close()`. A backend whose close() ends its session (the server frees its locks with it) may
   * stop waiting for a server that is out of reach, so the releases do not each wait out
   * opTimeout. No I/O, never throws.
   */
  closing?(): void;
  /** Releases what the backend itself owns (subscriber connections, timers); never user clients. */
  close(): Promise<void>;
}
