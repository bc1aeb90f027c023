/**
 * A holder in its own process (test/etcd/paused.test.ts pauses it with SIGSTOP): acquires KEY on
 * HOSTS with ttl 10 s under a 2 s etcd lease and says "held <fence>". A 20 ms interval watches
 * for a pause: its first callback after a gap of more than a second (the first timer due after
 * SIGCONT, before the driver's own) says "resumed held=<held> remaining=<ms> aborted=<signal>"
 * and the process ends.
 */
import { Etcd3 } from 'etcd3';
import { etcd } from '../../src/backends/etcd/index.js';
import { createLocks } from '../../src/index.js';

const client = new Etcd3({ hosts: process.env.HOSTS!.split(',').map((h) => `http://${h}`), dialTimeout: 1000 });
const locks = createLocks(etcd(client, { leaseTtl: '2s' }), { prefix: process.env.PREFIX!, ttl: '10s' });
const lease = await locks.acquire(process.env.KEY!, { wait: '10s' });
console.log(`held ${lease.fence}`);
let last = performance.now();
const probe = setInterval(() => {
  const t = performance.now();
  const gap = t - last;
  last = t;
  if (gap < 1000) return;
  // read in this order, as a user would: held first, then what is left, then the signal
  const held = lease.held;
  const remaining = lease.remaining();
  const aborted = lease.signal.aborted;
  console.log(`resumed held=${held} remaining=${remaining} aborted=${aborted}`);
  clearInterval(probe);
  void locks.close().finally(() => client.close());
}, 20);
