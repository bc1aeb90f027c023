/**
 * A lock holder in its own process (the SIGSTOP test freezes it): acquires `key` on `hosts`,
 * prints one JSON line when granted and one when the lease is lost, then waits.
 *   node --import tsx test/zookeeper/holder.ts <hosts> <key> <sessionTimeoutMs> <ttlMs>
 */
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks } from '../../src/index.js';

const [hosts = '', key = 'k', session = '2000', ttl = '30000'] = process.argv.slice(2);
const say = (m: object) =>
  process.stdout.write(JSON.stringify(m, (_, v) => (typeof v === 'bigint' ? String(v) : v)) + '\n');

const backend = await connectZookeeper(hosts, { sessionTimeout: Number(session) });
const locks = createLocks(backend, { ttl: Number(ttl), prefix: 'failover' });
const lease = await locks.acquire(key, { wait: '20s' });
lease.signal.addEventListener('abort', () => {
  say({ kind: 'lost', reason: String((lease.signal.reason as Error)?.name), held: lease.held, t: Date.now() });
});
say({ kind: 'granted', fence: lease.fence, session: backend.sessionId });
process.stdin.on('data', () => {}); // stays until the test ends it
process.stdin.on('end', () => process.exit(0));
