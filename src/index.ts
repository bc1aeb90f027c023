export { createLocks } from './locks.js';
export type {
  Locks,
  LocksOptions,
  AcquireOptions,
  TryAcquireOptions,
  RunExclusiveOptions,
  RunExclusiveResult,
  LockInfo,
} from './locks.js';
export type { Lease } from './lease.js';
export type {
  Backend,
  BackendCapabilities,
  AcquireRequest,
  Grant,
  ExtendItem,
  LostCallback,
  ResultStore,
} from './backend.js';
export type { LockInfo as BackendLockInfo } from './backend.js';
export { toMs, MAX_DURATION_MS, MIN_RENEWABLE_TTL_MS, type Duration } from './duration.js';
export { MAX_KEY_BYTES } from './validate.js';
export {
  LeaseholdError,
  ClosedError,
  InvalidArgumentError,
  LockTimeoutError,
  LeaseLostError,
  QuorumError,
  BackendError,
  StaleFenceError,
  ConflictError,
  NotLeaderError,
} from './errors.js';
export type { Election, ElectOptions, LeaderInfo, Term } from './recipes/election.js';
export { UnserializableError, type IdempotentOptions } from './recipes/idempotency.js';
export { fromUrl, redactUrl } from './url.js';
export { withOptimisticRetry, type OptimisticRetryOptions } from './recipes/optimistic.js';
export { FenceGate } from './fencing/gate.js';
export { channels } from './events.js';
export type { AcquireEvent, ReleaseEvent, ExtendEvent, LostEvent, WaitEvent, WarningEvent } from './events.js';
export type { RetryOptions } from './wait.js';
