// A command run under `leasehold run` in the CLI tests. Appends JSON lines to $JOB_LOG (on the
// machine's monotonic clock, shared by every process): {start} when it begins, {end} after
// $JOB_MS ms, {term} if SIGTERM arrives first (then exits 143). Exits with $JOB_EXIT (default 0).
/* global process, setTimeout */
import { appendFileSync, closeSync } from 'node:fs';

// the test waits for leasehold's output to end: the command must not keep its pipes open
closeSync(1);
closeSync(2);

const now = () => Number(process.hrtime.bigint()) / 1e6;
const log = (m) =>
  appendFileSync(
    process.env.JOB_LOG,
    JSON.stringify({
      ...m,
      t: now(),
      pid: process.pid,
      tag: process.env.JOB_TAG ?? '',
      key: process.env.LEASEHOLD_KEY,
      fence: process.env.LEASEHOLD_FENCE,
      hasToken: (process.env.LEASEHOLD_TOKEN ?? '').length >= 20,
      leader: process.env.LEASEHOLD_LEADER,
    }) + '\n',
  );
process.on('SIGTERM', () => {
  log({ ev: 'term' });
  process.exit(143);
});
log({ ev: 'start' });
setTimeout(
  () => {
    log({ ev: 'end' });
    process.exit(Number(process.env.JOB_EXIT ?? 0));
  },
  Number(process.env.JOB_MS ?? 100),
);
