/**
 * ownerTxn's arguments: something that is not a lease is an InvalidArgumentError (it was a
 * LeaseLostError naming the key "undefined"); a lease this backend no longer holds is a
 * LeaseLostError, and a held one gives a transaction that commits.
 */
import { afterAll, expect, test } from 'vitest';
import { etcd, ownerTxn } from '../../src/backends/etcd/index.js';
import { createLocks, InvalidArgumentError, type Lease, LeaseLostError } from '../../src/index.js';
import { EtcdClients } from '../support/etcd.js';

const clients = new EtcdClients();
afterAll(() => clients.closeAll());

test.each([
  ['null', null],
  ['undefined', undefined],
  ['a string', 'lease'],
  ['an object without a token', { key: 'k', fence: 1n }],
  ['a fence that is not a bigint', { key: 'k', token: 't', fence: 1 }],
])('ownerTxn(backend, %s) → InvalidArgumentError', async (_, lease) => {
  const backend = etcd(await clients.make());
  expect(() => ownerTxn(backend, lease as unknown as Lease)).toThrow(InvalidArgumentError);
  await backend.close();
});

test('a held lease commits; once released it is a LeaseLostError', async () => {
  const client = await clients.make();
  const backend = etcd(client);
  const locks = createLocks(backend, { prefix: `lh-owner-${process.pid}-${Date.now().toString(36)}` });
  try {
    const lease = await locks.acquire('k');
    const key = `lh-owner-value-${process.pid}`;
    const r = await ownerTxn(backend, lease).then(client.put(key).value('v')).commit();
    expect(r.succeeded).toBe(true);
    await client.delete().key(key);
    await lease.release();
    expect(() => ownerTxn(backend, lease)).toThrow(LeaseLostError);
  } finally {
    await locks.close();
  }
});
