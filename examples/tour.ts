/**
 * The same walk-through on any backend, used by the per-client examples (redis-ioredis.ts,
 * redis-node-redis.ts, redlock.ts, postgres-pg.ts, postgres-postgresjs.ts), which only differ in
 * how they make the backend. Throws if the library does not do what the comments say.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { LockTimeoutError, type Locks } from 'leasehold';

export async function tour(locks: Locks): Promise<void> {
  // acquire (waiting up to `wait`), renew while fn runs, release; lease.signal aborts if the lock is lost
  const rows = await locks.withLock('report', async (lease) => {
    console.log(`withLock: holding "report" with fence ${lease.fence}, ${lease.remaining()} ms left`);
    await sleep(50, undefined, { signal: lease.signal }); // pass lease.signal to the work
    return 42;
  });
  console.log(`withLock: done, the report has ${rows} rows`);

  {
    await using order = await locks.acquire('order:42', { wait: '5s' }); // released at the end of the block
    const second = await locks.tryAcquire('order:42'); // one attempt, never waits: null while held
    const waited = await locks.acquire('order:42', { wait: 200 }).catch((e: unknown) => e);
    const info = await locks.inspect('order:42'); // { key, fence, remainingMs } — never the token
    console.log(
      `await using: "order:42" fence ${order.fence}; tryAcquire -> ${second}; inspect -> fence ${info?.fence}`,
    );
    if (second !== null) throw new Error('tryAcquire got a held lock');
    if (!(waited instanceof LockTimeoutError)) throw new Error(`acquire with wait: 200 gave ${String(waited)}`);
    console.log(`acquire with wait 200ms -> ${waited.name}: ${waited.message}`);
    if (info?.fence !== order.fence) throw new Error('inspect shows another fence');
  }
  const after = await locks.inspect('order:42');
  console.log(`after the block: "order:42" is ${after ? 'held' : 'free'}`);
  if (after) throw new Error('await using did not release');

  const next = await locks.tryAcquire('order:42');
  if (!next) throw new Error('the released lock could not be taken');
  console.log(`the next holder got fence ${next.fence} (fences only grow)`);
  await next.release();
}
