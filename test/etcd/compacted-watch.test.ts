/**
 * A lock watch (observe()'s pushes) whose etcd restarted after a compaction: etcd3 re-creates
 * the watch from the last revision it saw, etcd cancels it (compacted), and etcd3 drops it.
 * The watch stayed dead: observers fell back to polling. It is now armed again from now. On an
 * etcd member of this file's own (killed and restarted).
 */
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { etcd } from '../../src/backends/etcd/index.js';
import { createLocks } from '../../src/index.js';
import { EtcdCluster } from '../support/etcd-cluster.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let member: EtcdCluster;
const clients: Etcd3[] = [];

beforeAll(async () => {
  member = await EtcdCluster.start(1);
}, 60_000);
afterAll(async () => {
  for (const c of clients) c.close();
  await member?.stop();
});

const client = () => {
  const c = new Etcd3({ hosts: [`http://${member.hosts[0]}`], dialTimeout: 2000 });
  clients.push(c);
  return c;
};

async function until(what: string, ok: () => boolean, ms: number): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (ok()) return;
    await sleep(20);
  }
  throw new Error(`timed out after ${ms}ms waiting for ${what}`);
}

test('a watch cancelled for a compacted revision after a restart is armed again', async () => {
  const watching = etcd(client(), { leaseTtl: '3s' });
  const other = client();
  const key = `k-${process.pid}`;
  let changes = 0;
  const stop = await watching.watch(`cw:${key}`, () => changes++);
  const locks = createLocks(etcd(other, { leaseTtl: '3s' }), { prefix: 'cw', ttl: '3s' });
  try {
    /** An acquire and a release; true if the watch told of the acquire within 2 s. */
    const pushed = async (): Promise<boolean> => {
      const before = changes;
      const lease = await locks.acquire(key);
      const end = performance.now() + 2000;
      while (changes === before && performance.now() < end) await sleep(20);
      const told = changes > before;
      await lease.release();
      await sleep(50);
      return told;
    };
    expect(await pushed()).toBe(true); // the watch has seen a revision
    for (let i = 0; i < 20; i++) await other.put(`filler-${process.pid}`).value(String(i));
    const rev = (await other.get(`filler-${process.pid}`).exec()).header.revision;
    await other.kv.compact({ revision: rev, physical: true });
    await member.kill(0);
    await member.restart(0);
    // etcd3 reconnects and re-creates the watch from its last revision: cancelled (compacted)
    await until('the watch to hear of the restart', () => changes > 1, 15_000);
    // pushes again, each time (one look after the cancellation is not a push)
    for (let i = 0; i < 3; i++) expect(await pushed()).toBe(true);
  } finally {
    stop();
    await locks.close();
    await watching.close();
  }
}, 60_000);
