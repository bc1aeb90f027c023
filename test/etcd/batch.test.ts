/**
 * Renewal of many leases on etcd: one renewal tick probes every held lease in read-only
 * transactions of at most 128 operations each (etcd's default --max-txn-ops), sent together.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterAll, expect, test } from 'vitest';
import { etcd } from '../../src/backends/etcd/index.js';
import { createLocks, type ExtendEvent, type Lease } from '../../src/index.js';
import { EtcdClients } from '../support/etcd.js';

const clients = new EtcdClients();
afterAll(() => clients.closeAll());

test('300 held leases stay held across renewals (batches above etcd’s 128 operations per transaction)', async () => {
  const client = await clients.make();
  let txns = 0;
  const txn = client.kv.txn.bind(client.kv);
  client.kv.txn = ((...a: Parameters<typeof txn>) => (txns++, txn(...a))) as typeof client.kv.txn;
  const locks = createLocks(etcd(client), { prefix: `lh-batch-${Date.now()}`, ttl: 1500 });
  const batches: number[] = [];
  const onExtend = (m: unknown) => {
    const e = m as ExtendEvent;
    if (e.ok) batches.push(e.batch);
  };
  diagnostics.subscribe('leasehold:extend', onExtend);
  try {
    const leases: Lease[] = [];
    for (let i = 0; i < 300; i++) leases.push(await locks.acquire(`k${i}`));
    const before = txns;
    await new Promise((r) => setTimeout(r, 2000)); // > one TTL: every lease was renewed
    expect(leases.every((l) => l.held)).toBe(true);
    expect(Math.max(...batches)).toBeGreaterThan(128);
    // a tick of n leases is ceil(n / 128) transactions, not n
    expect(txns - before).toBeLessThan(300);
    for (const l of leases) expect(await l.release()).toBe(true);
  } finally {
    diagnostics.unsubscribe('leasehold:extend', onExtend);
    await locks.close();
  }
}, 60_000);
