/**
 * How a caller the session backend (session.ts) refused waits for its next attempt
 * (`waitForChange`): in the server's lock queue, woken by its grant alone (queue.ts); else woken
 * by a NOTIFY of the key (notify.ts), or by a poll at least every POLL_MS, and no sooner than a
 * runExclusive window its last attempt met has ended.
 */
import type { Notifier } from './notify.js';
import type { ServerQueue } from './queue.js';
import type { Statements } from './sql.js';

/** A waiter re-tries at least this often: a holder whose session died sends no NOTIFY. */
const POLL_MS = 500;

/** `windowLeft`: keys whose last attempt met a runExclusive window, ms left (taken here). */
export function sleepUntilChange(
  queue: ServerQueue,
  notifier: Notifier,
  sql: Statements,
  windowLeft: Map<string, number>,
  key: string,
  signal: AbortSignal,
  maxMs: number,
): Promise<void> {
  if (typeof key !== 'string') return Promise.resolve();
  const windowMs = windowLeft.get(key);
  windowLeft.delete(key);
  const w = queue.get(key);
  // in the server's queue: woken by the grant alone (or when the wait ends)
  if (w && windowMs === undefined) return queue.sleep(w, signal, maxMs);
  const cap = windowMs === undefined ? POLL_MS : Math.max(POLL_MS, windowMs + 5);
  try {
    return notifier.wait(key, sql.lockKey(key), signal, Math.min(maxMs, cap));
  } catch (e) {
    return Promise.reject(e);
  }
}
