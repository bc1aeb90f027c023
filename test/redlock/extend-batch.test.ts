/**
 * One renewal round for many leases: a lease with a short TTL in the batch must not cut the wait
 * for the others. Nodes 1 and 2 of 3 are reached through a proxy that delays every reply by 25ms
 * each way; a 60s lease renewed beside a 20ms one (validity 18ms) is still extended.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { redlock } from '../../src/backends/redlock/index.js';
import { Proxy } from '../faults/proxy.js';
import { type AnyClient, clients, closeClients, requireShared, SHARED_PORTS, token } from './nodes.js';

const run = crypto.randomUUID().slice(0, 8);
const proxies: Proxy[] = [];
let cs: AnyClient[] = [];

beforeAll(async () => {
  await requireShared(SHARED_PORTS.slice(0, 3));
  for (const port of SHARED_PORTS.slice(1, 3)) {
    const p = new Proxy(port);
    await p.listen();
    proxies.push(p);
  }
  cs = await clients('ioredis', [SHARED_PORTS[0]!, ...proxies.map((p) => p.port)]);
});
afterAll(async () => {
  await closeClients(cs);
  for (const p of proxies) await p.close();
});

it('a short-TTL item in an extend batch does not make the long leases beside it fail', async () => {
  const b = redlock(cs);
  try {
    const long = `lh-test-${run}:long`;
    const t = token();
    expect(await b.acquire(long, { token: t, ttlMs: 60_000 })).not.toBeNull();
    for (const p of proxies) p.setMode({ kind: 'delay', ms: 25 });
    // alone, the long lease is extended (two of three nodes answer within ~50ms)
    expect(await b.extend([{ key: long, token: t, ttlMs: 60_000 }])).toEqual([true]);
    // beside an item whose own validity (18ms) is shorter than those nodes' round trip
    const short = { key: `lh-test-${run}:short`, token: token(), ttlMs: 20 };
    expect(await b.extend([{ key: long, token: t, ttlMs: 60_000 }, short])).toEqual([true, false]);
    for (const p of proxies) p.setMode({ kind: 'pass' });
    expect(await b.release(long, t)).toBe(true);
  } finally {
    for (const p of proxies) p.setMode({ kind: 'pass' });
    await b.close();
  }
});
