/**
 * Exactly-once effects with `locks.idempotent`: 20 concurrent requests with one idempotency key
 * (a client retrying, a message delivered twice), spread over three instances, charge the card
 * once, and every caller gets the same stored receipt. A run that throws stores nothing, so the
 * next attempt runs again. Exits 1 if the card was charged more than once.
 *
 *   npx tsx examples/idempotency.ts                          # memory backend, no server
 *   npx tsx examples/idempotency.ts redis://127.0.0.1:6379   # or postgres://…, or several redis:// (Redlock)
 */
import { randomUUID } from 'node:crypto';
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

interface Receipt {
  id: string;
  amountCents: number;
}
let charges = 0;
/** The side effect that must happen once: charging a card. */
async function chargeCard(amountCents: number): Promise<Receipt> {
  charges++;
  await sleep(50); // the payment provider's round trip
  return { id: `rcpt_${randomUUID().slice(0, 8)}`, amountCents };
}

const instances = await Promise.all([1, 2, 3].map(async () => createLocks(await backend(), { prefix })));
const requestId = randomUUID(); // what the client sends as its Idempotency-Key

// 20 deliveries of the same request, at once, on three instances
const receipts = await Promise.all(
  Array.from({ length: 20 }, (_, i) =>
    instances[i % 3]!.idempotent(`charge:${requestId}`, () => chargeCard(1999), { ttl: '1h' }),
  ),
);
const ids = new Set(receipts.map((r) => r.id));
console.log(`20 requests -> ${charges} charge(s), receipts: ${[...ids].join(', ')}`);

// a run that throws stores nothing: the retry runs again
const retryKey = `charge:${randomUUID()}`;
let attempts = 0;
const first = await instances[0]!
  .idempotent(retryKey, async () => {
    attempts++;
    throw new Error('card network timeout');
  })
  .catch((e: Error) => e.message);
const second = await instances[1]!.idempotent(retryKey, async () => {
  attempts++;
  return chargeCard(500);
});
console.log(`failed run: "${first}"; the retry ran again (${attempts} attempts) and stored ${second.id}`);

await Promise.all(instances.map((l) => l.close()));
if (charges !== 2 || ids.size !== 1 || attempts !== 2) {
  console.error(`FAILED: ${charges} charges, ${ids.size} distinct receipts, ${attempts} attempts`);
  process.exit(1);
}
console.log('ok: charged once per idempotency key; every caller got the stored receipt');
