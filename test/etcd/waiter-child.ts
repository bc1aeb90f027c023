/**
 * A waiter in its own process (test/etcd/failover.test.ts pauses it with SIGSTOP): acquires
 * KEY on the cluster HOSTS with a 2 s etcd lease, says "queued" when refused (once, and once
 * more after a failed attempt), "attempt failed: <message>" when an attempt fails, then
 * "granted <fence>" or "failed <message>" — one line each on stdout.
 */
import { Etcd3 } from 'etcd3';
import { etcd } from '../../src/backends/etcd/index.js';
import { createLocks } from '../../src/index.js';

const client = new Etcd3({ hosts: process.env.HOSTS!.split(',').map((h) => `http://${h}`), dialTimeout: 1000 });
const backend = etcd(client, { leaseTtl: '2s' });
const acquire = backend.acquire.bind(backend);
let said = false;
backend.acquire = async (...a) => {
  let g;
  try {
    g = await acquire(...a);
  } catch (e) {
    said = false;
    console.log(`attempt failed: ${(e as Error).message.replace(/\n/g, ' ')}`);
    throw e;
  }
  if (!g && !said) {
    said = true;
    console.log('queued');
  }
  return g;
};
const locks = createLocks(backend, { prefix: process.env.PREFIX!, ttl: '30s' });
try {
  const lease = await locks.acquire(process.env.KEY!, { wait: '20s' });
  console.log(`granted ${lease.fence}`);
} catch (e) {
  console.log(`failed ${(e as Error).message.replace(/\n/g, ' ')}`);
}
await locks.close().catch(() => {});
client.close();
