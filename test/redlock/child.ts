/**
 * A process of the Redlock hand-over tests.
 *   queue <ports> <prefix> <key> <ttlMs>   waits for the key (acquire, wait 1h) on the nodes at
 *                                          the comma-separated ports; prints {kind:'held'} if granted
 *   contend <ports> <prefix> <key> <ttlMs> <count>
 *                                          connects and subscribes its wake channel on every node,
 *                                          prints {kind:'ready'}, waits for a line on stdin, then
 *                                          acquires and releases the key `count` times (1 ms held),
 *                                          printing {kind:'waits', waits:[ms…]} at the end
 * The parent SIGKILLs it while it waits.
 */
import { Redis } from 'ioredis';
import { redlock } from '../../src/backends/redlock/index.js';
import { createLocks } from '../../src/index.js';

const say = (m: object) =>
  process.stdout.write(JSON.stringify(m, (_, v) => (typeof v === 'bigint' ? String(v) : v)) + '\n');

const [role, ports, prefix, key, ttl] = process.argv.slice(2);
const clients = ports!.split(',').map((p) => new Redis(Number(p), '127.0.0.1', { maxRetriesPerRequest: 1 }));
const backend = redlock(clients);
const locks = createLocks(backend, { prefix: prefix!, ttl: Number(ttl), wait: '1h' });

if (role === 'contend') {
  // first contact (connections, scripts, the wake channel's subscriptions) is not a handoff: it
  // happens before the parent lets every contender start at once
  await (await locks.acquire(`${key}:warm:${process.pid}`)).release();
  const wakeups = (backend as unknown as { wakeups: { subscribe(): Promise<boolean> } }).wakeups;
  if (!(await wakeups.subscribe())) throw new Error('wake channel not subscribed on enough nodes');
  say({ kind: 'ready' });
  await new Promise((r) => process.stdin.once('data', r));
  process.stdin.destroy();
  const waits: number[] = [];
  for (let i = 0; i < Number(process.argv[7]); i++) {
    const t0 = performance.now();
    const lease = await locks.acquire(key!);
    waits.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 1));
    await lease.release();
  }
  say({ kind: 'waits', waits });
}
if (role === 'queue') {
  say({ kind: 'waiting' });
  const lease = await locks.acquire(key!);
  say({ kind: 'held', fence: lease.fence });
}
await locks.close();
for (const c of clients) c.disconnect();
say({ kind: 'done' });
