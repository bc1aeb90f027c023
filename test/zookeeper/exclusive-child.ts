/**
 * runExclusive in its own process (the lockAtLeastFor test SIGKILLs it during the window): prints
 * one JSON line with the grant's wall-clock time once runExclusive returned, then waits.
 *   node --import tsx test/zookeeper/exclusive-child.ts <hosts> <key> <sessionTimeoutMs> <atLeastMs> <atMostMs>
 */
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks } from '../../src/index.js';

const [hosts = '', key = 'k', session = '10000', atLeast = '2500', atMost = '5000'] = process.argv.slice(2);
const backend = await connectZookeeper(hosts, { sessionTimeout: Number(session) });
const locks = createLocks(backend, { ttl: Number(session), prefix: 'exclusive' });
let granted = 0;
const r = await locks.runExclusive(key, () => void (granted = Date.now()), {
  lockAtLeastFor: Number(atLeast),
  lockAtMostFor: Number(atMost),
});
process.stdout.write(JSON.stringify({ ran: r.ran, granted }) + '\n');
process.stdin.on('data', () => {}); // stays until the test kills it
process.stdin.on('end', () => process.exit(0));
