/**
 * The backend itself (not the Locks) closed while withLock's or runExclusive's function runs:
 * they reject with ClosedError once it returns — the lock was not taken from the caller, but it
 * did not stay held to the end either (ZooKeeper's close ends the session and its nodes, etcd's
 * revokes the lease; memory and SQLite refuse the release). Before, the ZooKeeper and etcd
 * releases returned false after close() and both rejected with a misleading LeaseLostError
 * ("expired, deleted or taken over"); memory and SQLite resolved as if all was well. On a real
 * ZooKeeper (127.0.0.1:2181) and etcd (127.0.0.1:2379) per scripts/services.sh.
 */
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import type { Backend } from '../../src/backend.js';
import { etcd } from '../../src/backends/etcd/index.js';
import { memory } from '../../src/backends/memory/index.js';
import { sqlite } from '../../src/backends/sqlite/index.js';
import { createLocks, ClosedError, type Locks } from '../../src/index.js';
import { EtcdClients } from '../support/etcd.js';
import { TempDbs } from '../support/sqlite.js';
import { Zk } from '../support/zookeeper.js';

const zk = new Zk();
const etcds = new EtcdClients();
const dbs = new TempDbs();
const open: Locks[] = [];
let n = 0;
const key = () => `closed-under-${process.pid}-${++n}`;

afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  await zk.closeAll();
  etcds.closeAll();
  dbs.cleanup();
});

const backends: Record<string, () => Promise<Backend>> = {
  zookeeper: () => zk.backend({ sessionTimeout: 10_000 }),
  etcd: async () => etcd(await etcds.make()),
  memory: async () => memory(),
  sqlite: async () => sqlite(dbs.path()),
};

describe.each(Object.keys(backends))('%s: the backend closed under a running function', (name) => {
  async function locks(): Promise<{ backend: Backend; locks: Locks }> {
    const backend = await backends[name]!();
    const l = createLocks(backend, { ttl: 10_000 });
    open.push(l);
    return { backend, locks: l };
  }

  test('withLock rejects with ClosedError (not LeaseLostError) once fn returns', async () => {
    const { backend, locks: l } = await locks();
    let ran = false;
    const e = await l
      .withLock(key(), async () => {
        await backend.close();
        ran = true;
        return 'v';
      })
      .catch((x: unknown) => x);
    expect(ran).toBe(true);
    expect(e).toBeInstanceOf(ClosedError);
  });

  test('runExclusive rejects with ClosedError (not LeaseLostError) once fn returns', async () => {
    const { backend, locks: l } = await locks();
    const e = await l
      .runExclusive(key(), async () => {
        await backend.close();
        return 'v';
      })
      .catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ClosedError);
  });
});
