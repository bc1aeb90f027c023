/**
 * Leader election: three candidates campaign for "scheduler"; an observer (`elect(name)` without
 * options: it cannot campaign) prints every leader as it changes. Each leader works a little,
 * then resigns, and the next candidate takes over with a higher fence. The example checks its
 * own claims (one leader at a time, the observer saw every leader, fences increase) and exits 1
 * if one fails.
 *
 *   npx tsx examples/election.ts                          # memory backend, no server
 *   npx tsx examples/election.ts redis://127.0.0.1:6379   # or postgres://…, or redis://a,redis://b,redis://c (Redlock)
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createLocks, fromUrl, type Backend, type LeaderInfo } from 'leasehold';
import { memory, MemoryStore } from 'leasehold/memory';

// memory by default (the instances share one store, as processes share a server), or a URL
const url = process.argv[2] ?? process.env.LEASEHOLD_URL;
const store = new MemoryStore();
// redis:// URLs separated by commas are Redlock's nodes; any other URL is passed whole (etcd:// and
// redis+cluster:// list their hosts with commas too)
const REDLOCK_LIST = /^rediss?:\/\/[^,]+(,rediss?:\/\/[^,]+)+$/;
const backend = (): Promise<Backend> =>
  url ? fromUrl(REDLOCK_LIST.test(url) ? url.split(',') : url) : Promise.resolve(memory({ store }));
const prefix = process.env.LEASEHOLD_PREFIX ?? 'examples';

// the observer: first the current leader (or null), then each change
const watcher = createLocks(await backend(), { prefix });
const stop = new AbortController();
const seen: LeaderInfo[] = [];
let ready!: () => void;
const watching = new Promise<void>((r) => (ready = r));
const observed = (async () => {
  for await (const leader of watcher.elect('scheduler').observe({ signal: stop.signal })) {
    console.log(leader ? `observer: ${leader.value} leads (fence ${leader.fence})` : 'observer: no leader');
    if (leader) seen.push(leader);
    ready();
  }
})();
await watching;

let leading = 0;
let overlaps = 0;

async function candidate(name: string): Promise<void> {
  const locks = createLocks(await backend(), { prefix, ttl: '5s' });
  const election = locks.elect('scheduler', { value: name });
  election.on('demoted', (why) => console.log(`${name}: demoted (${why instanceof Error ? why.message : why})`));
  const term = await election.campaign(); // waits as long as it takes
  if (++leading > 1) overlaps++;
  console.log(`${name}: elected with fence ${term.fence}`);
  // the leader's work: stops at once if the term is lost (term.signal aborts)
  await sleep(500, undefined, { signal: term.signal }).catch(() => {});
  leading--;
  await election.resign();
  await locks.close();
}

await Promise.all(['node-a', 'node-b', 'node-c'].map(candidate));
await sleep(200); // the observer's last change arrives by push
stop.abort();
await observed;
await watcher.close();

const fences = seen.map((l) => l.fence);
const problems = [
  overlaps > 0 && `${overlaps} times two leaders at once`,
  new Set(seen.map((l) => l.value)).size !== 3 && `the observer saw ${seen.map((l) => l.value).join(', ')}`,
  fences.some((f, i) => i > 0 && f <= fences[i - 1]!) && `fences did not increase: ${fences.join(', ')}`,
].filter(Boolean);
if (problems.length) {
  console.error(`FAILED: ${problems.join('; ')}`);
  process.exit(1);
}
console.log(`ok: 3 leaders, one at a time, each seen by the observer, fences ${fences.join(' < ')}`);
