/** Real Redis clients for tests. A missing server fails the test run; it is never skipped. */
// connectTimeout 10 s: a server that is down refuses at once; the timeout only bites a machine so
// loaded (load average ~25 on 2 cores in CI) that the connect handshake itself waited over 2 s
import { Redis } from 'ioredis';
import { createClient } from 'redis';

export const REDIS_URL = process.env.LEASEHOLD_REDIS_URL ?? 'redis://127.0.0.1:6379';

export type ClientKind = 'ioredis' | 'node-redis';

/** Opens clients and remembers them so one call closes them all. */
export class Clients {
  private readonly open: Array<() => Promise<unknown>> = [];

  /** `keyPrefix`: the client puts it on every key it sends (both clients have the option). */
  async make(kind: ClientKind, url = REDIS_URL, opts: { keyPrefix?: string } = {}): Promise<any> {
    if (kind === 'ioredis') {
      const c = new Redis(url, { maxRetriesPerRequest: 1, connectTimeout: 10_000, lazyConnect: true, ...opts });
      await c.connect().catch((e: Error) => {
        throw new Error(`Redis at ${url} is not reachable (run scripts/services.sh): ${e.message}`);
      });
      this.open.push(() => c.quit().catch(() => c.disconnect()));
      return c;
    }
    const c = createClient({
      url,
      socket: { connectTimeout: 10_000, reconnectStrategy: false },
      ...opts,
    } as never) as any;
    c.on('error', () => {});
    await c.connect().catch((e: Error) => {
      throw new Error(`Redis at ${url} is not reachable (run scripts/services.sh): ${e.message}`);
    });
    this.open.push(() => c.close().catch(() => {}));
    return c;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.open.splice(0).map((f) => f()));
  }
}
