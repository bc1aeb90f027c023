/**
 * A process of the election test: a candidate (`candidate <value>`) or an observer (`observe`),
 * with the machine's monotonic clock (one clock for every process). A candidate leads for
 * `LEAD_MS`, resigns, and campaigns again, from the test's go (a line on stdin) on. Each says
 * `ready` once it is set: an observer once it observes, a candidate before it waits for go.
 */
import { createLocks, fromUrl } from '../../src/index.js';

const clock = (): number => Number(process.hrtime.bigint()) / 1e6;
const say = (m: object) =>
  process.stdout.write(JSON.stringify({ ...m, t: clock() }, (_, v) => (typeof v === 'bigint' ? String(v) : v)) + '\n');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const [role, value] = process.argv.slice(2);
const name = process.env.ELECTION_NAME!;
const leadMs = Number(process.env.LEAD_MS ?? 300);
const locks = createLocks(await fromUrl(process.env.LEASEHOLD_TEST_URL!), {
  ttl: process.env.TTL ?? '2s',
  prefix: process.env.PREFIX!,
});

if (role === 'observe') {
  // ready once observing: the first value (the current leader, none yet) comes after the watch is
  // in place, so no term granted from now on is first seen by a late initial read
  let first = true;
  for await (const leader of locks.elect(name).observe()) {
    if (first) say({ kind: 'ready' });
    else say({ kind: 'observed', leader });
    first = false;
  }
} else {
  const election = locks.elect(name, { value: value! });
  election.on('demoted', () => say({ kind: 'demoted', value }));
  say({ kind: 'ready' });
  // campaign once the test says go (a line on stdin): all candidates are started by then, and no
  // term is granted while the others still load (their start-up starves the observer under load)
  await new Promise((r) => process.stdin.once('data', r));
  process.stdin.pause();
  for (;;) {
    const term = await election.campaign();
    say({ kind: 'elected', value, fence: term.fence });
    await sleep(leadMs);
    await election.resign().catch(() => {});
    await sleep(20 + Math.random() * 30);
  }
}
