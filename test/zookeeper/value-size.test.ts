/**
 * A holder value (acquire's `value`, an election candidate's) is stored in the lock node's data.
 * ZooKeeper answers a request larger than its jute.maxbuffer (1 MB by default) by closing the
 * connection: a value that cannot fit is bad input, refused before any I/O.
 *
 * On the old code a value just under node-zookeeper-client's own check (1,048,576 bytes of data)
 * reached the server: each create dropped the session's connection (SUSPENDED then RECONNECTED
 * for every lease on it, 148 state changes in 2 s; signalled lost with suspendedIsLost), and the
 * wait retried it — a dropped connection is transient — until its deadline, to end in a
 * LockTimeoutError. A larger one failed as a BackendError from the client.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterEach, describe, expect, test } from 'vitest';
import type { ZookeeperEvent } from '../../src/backends/zookeeper/index.js';
import { createLocks, InvalidArgumentError, type Locks } from '../../src/index.js';
import { Zk } from '../support/zookeeper.js';

const zk = new Zk();
const open: Locks[] = [];
const prefix = 'value-size';

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
  await zk.closeAll();
});

describe('zookeeper: a holder value too large for a node', () => {
  test('is refused with InvalidArgumentError before any I/O; the connection stays up', async () => {
    const backend = await zk.backend();
    const locks = createLocks(backend, { prefix });
    open.push(locks);
    const held = await locks.acquire(`k-${process.pid}-held`);
    const states: string[] = [];
    const on = (m: unknown) => {
      const e = m as ZookeeperEvent;
      if (e.type !== 'watch') states.push(e.type);
    };
    diagnostics.subscribe('leasehold:zookeeper', on);
    try {
      const k = `k-${process.pid}-1`;
      // under node-zookeeper-client's own limit on data (1,048,576 bytes), over the server's on a
      // request (jute.maxbuffer, 1,048,575 bytes by default)
      const edge = 'x'.repeat(1_048_500);
      await expect(locks.acquire(k, { value: edge, wait: '2s' })).rejects.toBeInstanceOf(InvalidArgumentError);
      const huge = 'x'.repeat(1_100_000);
      await expect(locks.acquire(k, { value: huge, wait: '2s' })).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(locks.tryAcquire(k, { value: huge })).rejects.toBeInstanceOf(InvalidArgumentError);
      // JSON escapes a control character in six bytes: counted as stored
      await expect(locks.tryAcquire(k, { value: '\u0001'.repeat(200_000) })).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
      expect(states).toEqual([]);
      expect(await zk.lockNodes(`${prefix}:${k}`)).toEqual([]);
      expect(held.held).toBe(true);
      // a large value that fits is stored and read back
      const big = 'y'.repeat(500_000);
      const lease = await locks.acquire(k, { value: big });
      expect((await locks.inspect(k))?.value).toBe(big);
      await lease.release();
    } finally {
      diagnostics.unsubscribe('leasehold:zookeeper', on);
    }
  }, 30_000);
});
