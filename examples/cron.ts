/**
 * Run once per cluster per window (ShedLock-style): three instances fire the same cron tick every
 * 250 ms for 3 s. `runExclusive` with `lockAtLeastFor: '1s'` lets exactly one of them run the job
 * per 1 s window and the others skip — even though the job itself takes only 20 ms and the
 * instances' ticks are not in step. The window is kept by the lock's stored expiry, not a timer,
 * so it holds even if the instance that ran the job exits or crashes. Exits 1 if a run started
 * less than 1 s after the call that won the previous window (the window counts from that call,
 * so on a busy machine two job starts may be closer than 1 s when a grant's reply was slow).
 *
 *   npx tsx examples/cron.ts                          # memory backend, no server
 *   npx tsx examples/cron.ts postgres://postgres@127.0.0.1:5432/test   # or redis://…, or several redis:// (Redlock)
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

const t0 = performance.now();
const runs: { at: number; calledAt: number; by: string }[] = [];
let skipped = 0;

async function sendNightlyReport(by: string, calledAt: number): Promise<void> {
  runs.push({ at: performance.now() - t0, calledAt, by });
  console.log(`${(performance.now() - t0).toFixed(0).padStart(5)} ms  ${by} runs the job`);
  await sleep(20);
}

async function instance(name: string, offsetMs: number): Promise<void> {
  const locks = createLocks(await backend(), { prefix });
  await sleep(offsetMs); // the instances' clocks and schedulers are not in step
  for (let tick = 0; tick < 12; tick++) {
    const calledAt = performance.now() - t0;
    const r = await locks.runExclusive('nightly-report', () => sendNightlyReport(name, calledAt), {
      lockAtLeastFor: '1s', // at most one run per second, however fast the job is
      lockAtMostFor: '30s', // and the lock never outlives a crashed run by more than this
    });
    if (!r.ran) skipped++;
    await sleep(250);
  }
  await locks.close(); // the last window stays in force: it is the stored expiry
}

await Promise.all([instance('web-1', 0), instance('web-2', 40), instance('web-3', 90)]);

const gaps = runs.slice(1).map((r, i) => r.at - runs[i]!.at);
// each run starts at least 1 s after the call that won the window before it (1 ms: timer rounding)
const tooClose = runs.slice(1).flatMap((r, i) => (r.at - runs[i]!.calledAt < 999 ? [r.at - runs[i]!.calledAt] : []));
console.log(
  `${runs.length} runs and ${skipped} skips in 3 s across 3 instances; gaps ${gaps.map((g) => g.toFixed(0)).join(', ')} ms`,
);
if (runs.length < 2 || tooClose.length > 0) {
  console.error(
    `FAILED: ${runs.length} runs, runs inside the previous window (ms after its call): ${tooClose.map((g) => g.toFixed(0)).join(', ') || 'none'}`,
  );
  process.exit(1);
}
console.log('ok: one run per window across all instances');
