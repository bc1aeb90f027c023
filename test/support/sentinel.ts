/**
 * Real Redis Sentinel clients for tests (scripts/services.d/sentinel.sh: master 7311, replica
 * 7312, Sentinels 27311..27313 watching "leasehold"). A missing setup fails; it is never skipped.
 */
import { Redis } from 'ioredis';
import { createSentinel } from 'redis';
import type { ClientKind } from './redis.js';

export const SENTINELS = (process.env.LEASEHOLD_SENTINELS ?? '127.0.0.1:27311,127.0.0.1:27312,127.0.0.1:27313')
  .split(',')
  .map((hp) => {
    const [host, port] = hp.split(':');
    return { host: host!, port: Number(port) };
  });
export const SENTINEL_MASTER = process.env.LEASEHOLD_SENTINEL_MASTER ?? 'leasehold';
export const SENTINEL_URL = `redis+sentinel://${SENTINELS.map((s) => `${s.host}:${s.port}`).join(',')}/${SENTINEL_MASTER}`;

const unreachable = (e: Error) =>
  new Error(`Redis Sentinel at ${SENTINEL_URL} is not reachable (run scripts/services.sh sentinel): ${e.message}`);

export class SentinelClients {
  private readonly open: Array<() => Promise<unknown>> = [];

  async make(kind: ClientKind): Promise<any> {
    if (kind === 'ioredis') {
      const c = new Redis({
        sentinels: SENTINELS,
        name: SENTINEL_MASTER,
        lazyConnect: true,
        maxRetriesPerRequest: 3,
        connectTimeout: 2000,
      });
      c.on('error', () => {});
      await c.connect().catch((e: Error) => {
        throw unreachable(e);
      });
      this.open.push(() => c.quit().catch(() => c.disconnect()));
      return c;
    }
    const c = createSentinel({
      name: SENTINEL_MASTER,
      sentinelRootNodes: SENTINELS,
      nodeClientOptions: { socket: { connectTimeout: 2000 } },
    });
    c.on('error', () => {});
    await c.connect().catch((e: Error) => {
      throw unreachable(e);
    });
    this.open.push(() => c.close().catch(() => c.destroy()));
    return c;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.open.splice(0).map((f) => f()));
  }
}
