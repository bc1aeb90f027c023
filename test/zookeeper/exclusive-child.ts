/**
 * runExclusive in its own process (the lockAtLeastFor test SIGKILLs it during the window): prints
 * one JSON line with the wall-clock time just before runExclusive was called (the window runs
 * from the grant's send, never earlier) once it returned, then waits.
 *   node --import tsx test/zookeeper/exclusive-child.ts <hosts> <key> <sessionTimeoutMs> <atLeastMs> <atMostMs>
 */
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks } from '../../src/index.js';

const [hosts = '', key = 'k', session = '10000', atLeast = '2500', atMost = '5000'] = process.argv.slice(2);
const backend = await connectZookeeper(hosts, { sessionTimeout: Number(session) });
const locks = createLocks(backend, { ttl: Number(session), prefix: 'exclusive' });
const asked = Date.now();
const r = await locks.runExclusive(key, () => undefined, {
  lockAtLeastFor: Number(atLeast),
  lockAtMostFor: Number(atMost),
});
process.stdout.write(JSON.stringify({ ran: r.ran, asked }) + '\n');
process.stdin.on('data', () => {}); // stays until the test kills it
process.stdin.on('end', () => process.exit(0));
