/** Picks the adapter (client.ts) for a user's Redis client. */
import { InvalidArgumentError } from '../../errors.js';
import type { RedisAdapter } from './client.js';
import { IoredisAdapter } from './ioredis.js';
import { NodeRedisAdapter } from './node-redis.js';

/** Detects the client type. Throws InvalidArgumentError for anything else. */
export function adapt(client: unknown, what = 'client'): RedisAdapter {
  const c = client as any;
  if (c && typeof c === 'object') {
    if (typeof c.evalsha === 'function' && typeof c.pipeline === 'function' && typeof c.duplicate === 'function') {
      return new IoredisAdapter(c);
    }
    if (typeof c.evalSha === 'function' && typeof c.duplicate === 'function') return new NodeRedisAdapter(c);
  }
  throw new InvalidArgumentError(`${what} must be an ioredis or node-redis (v4+) client`);
}
