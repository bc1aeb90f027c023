/**
 * A process of the SQLite tests, on the machine's monotonic clock (one clock for every process).
 *   contend <db> <key> <count> <csMs>   acquire → hold csMs → release, count times; prints each
 *                                       hold as {kind:'hold', start, end, fence, waited}
 *   hold <db> <key> <ms>                acquires, prints {kind:'held'}, holds ms, releases
 *   try <db> <key>                      tryAcquire once: prints {kind:'try', fence} (null: refused)
 *                                       or {kind:'try', error}, and releases
 *   later <db> <key> <ms>               opens the file (a tryAcquire of another key), prints
 *                                       {kind:'open'}, waits ms, then does what `try` does
 * Ends with {kind:'done'}.
 */
import { sqlite } from '../../src/backends/sqlite/index.js';
import { createLocks } from '../../src/index.js';

const clock = (): number => Number(process.hrtime.bigint()) / 1e6;
const say = (m: object) =>
  process.stdout.write(JSON.stringify(m, (_, v) => (typeof v === 'bigint' ? String(v) : v)) + '\n');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const [role, db, key, a, b] = process.argv.slice(2);
const locks = createLocks(sqlite(db!), { ttl: '10s', wait: '60s', prefix: 'lh-proc' });

if (role === 'contend') {
  const count = Number(a);
  const csMs = Number(b);
  say({ kind: 'ready' });
  for (let i = 0; i < count; i++) {
    const t0 = clock();
    const lease = await locks.acquire(key!);
    const start = clock();
    await sleep(csMs);
    const end = clock();
    await lease.release();
    say({ kind: 'hold', start, end, fence: lease.fence, waited: start - t0 });
  }
} else if (role === 'hold') {
  const lease = await locks.acquire(key!, { value: `pid-${process.pid}` });
  say({ kind: 'held', fence: lease.fence, t: clock() });
  await sleep(Number(a));
  await lease.release();
} else if (role === 'try' || role === 'later') {
  if (role === 'later') {
    await (await locks.tryAcquire(`${key!}:warm`))?.release();
    say({ kind: 'open' });
    await sleep(Number(a));
  }
  try {
    const lease = await locks.tryAcquire(key!);
    say({ kind: 'try', fence: lease?.fence ?? null });
    await lease?.release();
  } catch (e) {
    say({ kind: 'try', error: String(e) });
  }
}
await locks.close();
say({ kind: 'done' });
