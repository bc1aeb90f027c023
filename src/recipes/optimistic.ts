/**
 * Optimistic concurrency: retry an attempt that reports a version conflict, with jittered,
 * capped backoff, up to a limit. Backend-neutral; pairs with a versioned write such as
 *
 *   UPDATE accounts SET balance = $3, version = version + 1 WHERE id = $1 AND version = $2
 *
 * where "0 rows updated" means someone else wrote first: return `false` and read again.
 */
import { ConflictError, InvalidArgumentError } from '../errors.js';
import { checkOptions, checkSignal } from '../validate.js';
import { backoffDelay, parseRetry, sleep, type RetryOptions } from '../wait.js';

export interface OptimisticRetryOptions {
  /** Attempts in all, the first included, before ConflictError (default 5, at most 1,000). */
  maxAttempts?: number;
  /** Delay between attempts: jittered, growing by `factor`, capped (default 10ms → 500ms, ×2). */
  backoff?: RetryOptions;
  /** Stops retrying: rejects with `signal.reason` (checked before each attempt and while waiting). */
  signal?: AbortSignal;
}

const OPTIONS = ['maxAttempts', 'backoff', 'signal'] as const;
const MAX_ATTEMPTS = 1000;

/**
 * Calls `attempt(n)` (n = 1, 2, …) until it returns anything but `false`, and resolves with that.
 * `false` means a version conflict: wait a jittered backoff and try again. After `maxAttempts`
 * conflicts, rejects with ConflictError. An attempt that throws is not retried: the error
 * propagates at once. Options are validated before the first attempt.
 */
export async function withOptimisticRetry<T>(
  attempt: (n: number) => Promise<T | false> | T | false,
  options?: OptimisticRetryOptions,
): Promise<Exclude<T, false>> {
  if (typeof attempt !== 'function') throw new InvalidArgumentError('withOptimisticRetry: attempt must be a function');
  const o = checkOptions<OptimisticRetryOptions>(options, OPTIONS, 'withOptimisticRetry');
  const maxAttempts = o.maxAttempts ?? 5;
  if (
    typeof maxAttempts !== 'number' ||
    !Number.isInteger(maxAttempts) ||
    maxAttempts < 1 ||
    maxAttempts > MAX_ATTEMPTS
  ) {
    throw new InvalidArgumentError(`withOptimisticRetry: maxAttempts must be an integer from 1 to ${MAX_ATTEMPTS}`);
  }
  const backoff = parseRetry(o.backoff, 'withOptimisticRetry', 'backoff');
  const signal = checkSignal(o.signal, 'withOptimisticRetry');
  for (let n = 1; ; n++) {
    if (signal?.aborted) throw signal.reason;
    const result = await attempt(n);
    if (result !== false) return result as Exclude<T, false>;
    if (n >= maxAttempts) throw new ConflictError(n);
    await sleep(backoffDelay(backoff, n - 1), signal);
  }
}
