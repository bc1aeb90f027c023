/**
 * leasehold in one screen, on the in-process memory backend (no server needed):
 *   1. four workers contend for one key; each grant carries a larger fence;
 *   2. a holder is paused past its TTL (a GC pause, SIGSTOP): its signal fires, another worker
 *      takes over, and the resource rejects the paused holder's late, stale write.
 * Run: npx tsx examples/demo.ts   (`bash scripts/demo.sh` runs `leasehold demo`: the same story with real
 * processes on the embedded SQLite backend)
 */
import { createLocks, FenceGate, StaleFenceError } from 'leasehold';
import { memory, MemoryStore } from 'leasehold/memory';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const store = new MemoryStore(); // what a server would hold; each worker has its own Locks
const gate = new FenceGate(); // the protected resource's check: highest fence wins
const ledger: string[] = [];

function write(resource: string, fence: bigint, line: string) {
  gate.check(resource, fence); // throws StaleFenceError for a fence lower than one already seen
  ledger.push(line);
}

console.log('1. Four workers, one key, three jobs each (read-modify-write under the lock)');
let balance = 0;
await Promise.all(
  ['ada', 'bob', 'cy', 'dee'].map(async (name) => {
    const locks = createLocks(memory({ store }), { ttl: '2s' });
    for (let i = 0; i < 3; i++) {
      await locks.withLock('account:42', async (lease) => {
        const seen = balance;
        await sleep(5);
        balance = seen + 10;
        write('account:42', lease.fence, `${name} +10`);
        console.log(`   ${name.padEnd(4)} fence=${lease.fence}  balance=${balance}`);
      });
    }
    await locks.close();
  }),
);
console.log(`   balance ${balance} (expected 120): no lost update\n`);

console.log('2. A holder pauses past its TTL; the lease is lost and its late write is rejected');
const slow = createLocks(memory({ store }), { ttl: 300, renew: false });
const fast = createLocks(memory({ store }), { ttl: '2s' });
const paused = await slow.acquire('report');
paused.signal.addEventListener('abort', () =>
  console.log(`   slow: signal aborted -> ${String(paused.signal.reason)}`),
);
console.log(`   slow: holds "report" with fence ${paused.fence}, then stalls for 500ms…`);
await sleep(500);
const next = await fast.acquire('report');
console.log(`   fast: took over with fence ${next.fence}`);
write('report', next.fence, 'fast writes the report');
try {
  write('report', paused.fence, 'slow writes a stale report');
} catch (e) {
  if (!(e instanceof StaleFenceError)) throw e;
  console.log(`   slow: late write rejected: ${e.message}`);
}
console.log(`   slow.release() -> ${await paused.release()} (it was no longer ours)`);
await next.release();
await Promise.all([slow.close(), fast.close()]);
console.log(`\nledger: ${ledger.length} accepted writes; ${ledger.at(-1)}`);
