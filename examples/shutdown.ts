/**
 * Graceful shutdown: a worker holds the "queue-consumer" lock while it works. On SIGTERM (what
 * Kubernetes, systemd and docker stop send) or Ctrl-C it stops taking new work, lets the current
 * step finish, releases the lock with `locks.close()` and exits 0 — so the next instance takes
 * over at once instead of waiting out the TTL. Without this, a restart leaves the lock held for
 * up to a TTL.
 *
 *   npx tsx examples/shutdown.ts &  sleep 2; kill -TERM $!
 *   npx tsx examples/shutdown.ts redis://127.0.0.1:6379     # or postgres://…, or several redis:// (Redlock)
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createLocks, fromUrl, type Backend } from 'leasehold';
import { memory, MemoryStore } from 'leasehold/memory';

const url = process.argv[2] ?? process.env.LEASEHOLD_URL;
const store = new MemoryStore();
// redis:// URLs separated by commas are Redlock's nodes; any other URL is passed whole (etcd:// and
// redis+cluster:// list their hosts with commas too)
const REDLOCK_LIST = /^rediss?:\/\/[^,]+(,rediss?:\/\/[^,]+)+$/;
const backend = (): Promise<Backend> =>
  url ? fromUrl(REDLOCK_LIST.test(url) ? url.split(',') : url) : Promise.resolve(memory({ store }));
const prefix = process.env.LEASEHOLD_PREFIX ?? 'examples';

const shutdown = new AbortController();
for (const sig of ['SIGTERM', 'SIGINT'] as const) {
  process.once(sig, () => {
    console.log(`${sig}: finishing the current step, then releasing`);
    shutdown.abort(new Error(sig));
  });
}

const locks = createLocks(await backend(), { prefix, ttl: '30s' });
let steps = 0;
await locks
  .withLock(
    'queue-consumer',
    async (lease) => {
      console.log(`holding queue-consumer (fence ${lease.fence}); send SIGTERM to stop (pid ${process.pid})`);
      // stop on shutdown, and at once if the lease is lost
      const stop = AbortSignal.any([shutdown.signal, lease.signal]);
      while (!stop.aborted) {
        await sleep(100); // one unit of work (a step is never cut in half)
        steps++;
      }
    },
    { signal: shutdown.signal }, // also: stop waiting for the lock on shutdown
  )
  .catch((e: unknown) => {
    if (!shutdown.signal.aborted) throw e;
  });
await locks.close(); // releases whatever is still held, stops renewal; never closes your own clients
console.log(`released after ${steps} steps`);

// what the next instance sees: the lock is free now, not in 30 s
const next = createLocks(await backend(), { prefix });
const started = performance.now();
const lease = await next.tryAcquire('queue-consumer');
console.log(
  lease ? `the next instance took over in ${(performance.now() - started).toFixed(0)} ms` : 'FAILED: still held',
);
await lease?.release();
await next.close();
process.exitCode = lease ? 0 : 1;
