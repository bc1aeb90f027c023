/**
 * A Redlock backend's own drift allowance (driftFactor, driftMs) bounds the lease the engine
 * believes in: lease.held / remaining() never outlast `ttl − elapsed − drift` as the backend
 * counts it, on the grant and after every renewal or extend.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redlock } from '../../src/backends/redlock/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { type AnyClient, clients, closeClients, requireShared, SHARED_PORTS } from './nodes.js';

const run = crypto.randomUUID().slice(0, 8);
const ports = SHARED_PORTS.slice(0, 3);

describe('redlock: the configured drift bounds the lease', () => {
  let cs: AnyClient[];
  let locks: Locks;
  // drift = round(1000 × 0.2) + 50 = 250ms: the grant is valid for at most 750ms from its send
  const opts = { driftFactor: 0.2, driftMs: 50 };
  const validity = 1000 - 250;

  beforeAll(async () => {
    await requireShared(ports);
    cs = await clients('ioredis', ports);
    locks = createLocks(redlock(cs, opts), { prefix: `lh-test-${run}` });
  });
  afterAll(async () => {
    await locks?.close();
    await closeClients(cs ?? []);
  });

  it('a fresh grant', async () => {
    const lease = await locks.acquire('fresh', { ttl: 1000, renew: false });
    // by the backend's own rule the grant counts for 750ms from its send at most (the old code: ~985)
    expect(lease.remaining()).toBeLessThanOrEqual(validity);
    await lease.release();
  });

  it('a large drift allowance: the lease is renewed before its shorter validity runs out', async () => {
    // drift = 800 + 2: 198ms of validity out of a 1s TTL, less than the usual ttl / 3 renewal point
    const big = createLocks(redlock(cs, { driftFactor: 0.8 }), { prefix: `lh-test-${run}:big` });
    try {
      const lease = await big.acquire('renewed', { ttl: 1000 });
      expect(lease.remaining()).toBeLessThanOrEqual(198);
      let lost = false;
      lease.signal.addEventListener('abort', () => (lost = true));
      await new Promise((r) => setTimeout(r, 600)); // past three validities: it must have been renewed
      expect(lost).toBe(false);
      expect(lease.held).toBe(true);
      await lease.release();
    } finally {
      await big.close();
    }
  });

  it('after an explicit extend', async () => {
    const lease = await locks.acquire('extended', { ttl: 1000, renew: false });
    await lease.extend(1000);
    expect(lease.remaining()).toBeLessThanOrEqual(validity);
    await lease.release();
  });
});
