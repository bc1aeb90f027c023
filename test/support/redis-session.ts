/** Session-mode Redis backends for tests. */
import { adapt, RedisBackend } from '../../src/backends/redis/index.js';

/**
 * A session-mode backend whose locks' long PX is at least `lockPxMinMs` (not 10 min): their
 * refresh is due after a third of it. `client` may carry a keyPrefix.
 */
export const shortPx = (client: unknown, lockPxMinMs: number): RedisBackend =>
  new RedisBackend(adapt(client), {
    lingerMs: 2000,
    placeMs: 3000,
    fenceIdleMs: 86_400_000,
    claimMs: 500,
    session: true,
    lockPxMinMs,
  });
