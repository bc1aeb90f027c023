/**
 * The brand of a leasehold error: the names of its class and of each class above it, up to
 * LeaseholdError. The package ships an ESM and a CommonJS build, each with its own copy of these
 * classes, and an app may load both (an ESM app with a CommonJS dependency): `instanceof` then
 * checks the brand, so an error from either copy is an instance of the other's classes too.
 */
const BRAND = Symbol.for('leasehold.error');

/** Base class of every error leasehold throws; `code` is stable across versions. */
export class LeaseholdError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
    const names: string[] = [];
    for (let c: unknown = new.target; typeof c === 'function' && c !== Error; c = Object.getPrototypeOf(c)) {
      names.push(c.name);
    }
    Object.defineProperty(this, BRAND, { value: Object.freeze(names) });
  }

  /** An instance of this class, or an error of the same class (or a subclass) from leasehold's other build. */
  static override [Symbol.hasInstance](x: unknown): boolean {
    if (Function.prototype[Symbol.hasInstance].call(this, x)) return true;
    if (x === null || (typeof x !== 'object' && typeof x !== 'function')) return false;
    const names = (x as { [BRAND]?: unknown })[BRAND];
    return Array.isArray(names) && names.includes(this.name);
  }
}

/** The Locks (or backend) was closed: a call in flight, or made after `close()`. */
export class ClosedError extends LeaseholdError {
  constructor(message = 'this Locks instance is closed') {
    super('LEASEHOLD_CLOSED', message);
  }
}

/** A bad argument, rejected before any I/O. */
export class InvalidArgumentError extends LeaseholdError {
  constructor(message: string) {
    super('LEASEHOLD_INVALID_ARGUMENT', message);
  }
}

/** `acquire` could not get the lock before its `wait` deadline. */
export class LockTimeoutError extends LeaseholdError {
  readonly key: string;
  readonly waitedMs: number;
  /** `cause`: why the last attempt failed, when it was not simply "held" (e.g. a QuorumError). */
  constructor(key: string, waitedMs: number, options?: { cause?: unknown }) {
    super(
      'LEASEHOLD_LOCK_TIMEOUT',
      `could not acquire "${key}" within ${Math.round(waitedMs)}ms` +
        (options?.cause instanceof Error ? ` (last attempt: ${options.cause.message})` : ''),
      options,
    );
    this.key = key;
    this.waitedMs = waitedMs;
  }
}

/** The lease is no longer ours: expired, deleted, taken over, or its session died. */
export class LeaseLostError extends LeaseholdError {
  readonly key: string;
  constructor(key: string, reason: string, options?: { cause?: unknown }) {
    super('LEASEHOLD_LEASE_LOST', `lease on "${key}" lost: ${reason}`, options);
    this.key = key;
  }
}

/** A multi-node backend could not reach a majority. `causes` has one entry per node. */
export class QuorumError extends LeaseholdError {
  readonly causes: readonly unknown[];
  constructor(message: string, causes: readonly unknown[]) {
    super('LEASEHOLD_QUORUM', message, { cause: causes.find((c) => c instanceof Error) });
    this.causes = causes;
  }
}

/** The backend failed (connection, server error). */
export class BackendError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('LEASEHOLD_BACKEND', message, options);
  }
}

/** A resource saw a fence lower than the highest it has accepted. */
export class StaleFenceError extends LeaseholdError {
  readonly resource: string;
  readonly fence: bigint;
  readonly highest: bigint;
  constructor(resource: string, fence: bigint, highest: bigint) {
    super('LEASEHOLD_STALE_FENCE', `stale fence ${fence} for "${resource}" (highest seen ${highest})`);
    this.resource = resource;
    this.fence = fence;
    this.highest = highest;
  }
}

/** Optimistic retries ran out. */
export class ConflictError extends LeaseholdError {
  readonly attempts: number;
  constructor(attempts: number) {
    super('LEASEHOLD_CONFLICT', `version conflict persisted after ${attempts} attempts`);
    this.attempts = attempts;
  }
}

/** An operation needs leadership this process does not have. */
export class NotLeaderError extends LeaseholdError {
  constructor(message: string) {
    super('LEASEHOLD_NOT_LEADER', message);
  }
}
