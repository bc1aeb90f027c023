/**
 * etcd3's gRPC errors (GRPCUnavailableError, ...) and the BrokenCircuitError of its circuit
 * breaker leave `name` at "Error": the class is what says they are transient. A waiting acquire on an etcd that refuses connections must treat them so —
 * retry until its deadline, warn once — instead of failing at the first attempt.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Etcd3 } from 'etcd3';
import { afterAll, expect, test } from 'vitest';
import { etcd } from '../../src/backends/etcd/index.js';
import { BackendError, createLocks, LockTimeoutError, type WarningEvent } from '../../src/index.js';

const client = new Etcd3({ hosts: ['http://127.0.0.1:1'], dialTimeout: 500 });
afterAll(() => client.close());

test('a waiting acquire on an unreachable etcd retries UNAVAILABLE until its wait runs out', async () => {
  const locks = createLocks(etcd(client), { prefix: `lh-unavailable-${process.pid}` });
  const warnings: WarningEvent[] = [];
  const onWarning = (m: unknown) => void warnings.push(m as WarningEvent);
  subscribe('leasehold:warning', onWarning);
  try {
    const t0 = performance.now();
    const e = await locks.acquire('k', { wait: '1500ms' }).catch((x: unknown) => x);
    // before the fix: the BackendError of the first attempt, at once, and no warning
    expect(e).toBeInstanceOf(LockTimeoutError);
    expect((e as LockTimeoutError).cause).toBeInstanceOf(BackendError);
    // the last attempt's failure: UNAVAILABLE, or etcd3's circuit breaker that opened after three
    expect(String(((e as LockTimeoutError).cause as BackendError).cause)).toMatch(
      /^(GRPCUnavailableError: 14 UNAVAILABLE|BrokenCircuitError: )/,
    );
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1400);
    expect(warnings.filter((w) => w.code === 'LEASEHOLD_BACKEND_FAILING')).toHaveLength(1);
  } finally {
    unsubscribe('leasehold:warning', onWarning);
    await locks.close();
  }
});
