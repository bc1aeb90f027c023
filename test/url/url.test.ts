/** fromUrl against the real servers. */
import { afterAll, describe, expect, test } from 'vitest';
import {
  BackendError,
  createLocks,
  fromUrl,
  InvalidArgumentError,
  LeaseholdError,
  redactUrl,
} from '../../src/index.js';
import { Clients } from '../support/redis.js';

const clients = new Clients();
afterAll(() => clients.closeAll());

let admin: any;
/** Connections on database 11, which only this test uses. */
async function connectedClients(): Promise<number> {
  admin ??= await clients.make('ioredis');
  const list: string = await admin.client('LIST');
  return list.split('\n').filter((l) => / db=11 /.test(l)).length;
}

describe('fromUrl', () => {
  test('redis:// builds a working backend whose close() closes the client it owns', async () => {
    const before = await connectedClients();
    const backend = await fromUrl('redis://127.0.0.1:6379/11');
    expect(backend.name).toBe('redis');
    const locks = createLocks(backend, { prefix: 'lh-url' });
    const lease = await locks.acquire('url-key');
    expect(lease.fence).toBeGreaterThan(0n);
    expect(await connectedClients()).toBe(before + 1);
    await locks.close();
    await expect.poll(connectedClients, { timeout: 2000 }).toBe(before);
  });

  test('several redis:// URLs build Redlock; fewer than three are refused before connecting', async () => {
    const backend = await fromUrl(['redis://127.0.0.1:7001', 'redis://127.0.0.1:7002', 'redis://127.0.0.1:7003']);
    expect(backend.name).toBe('redlock');
    const locks = createLocks(backend, { prefix: 'lh-url' });
    const lease = await locks.acquire('url-redlock');
    expect(await lease.release()).toBe(true);
    await locks.close();
    await expect(fromUrl(['redis://127.0.0.1:7001', 'redis://127.0.0.1:7002'])).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await expect(fromUrl(['redis://127.0.0.1:7001', 'postgres://x', 'redis://y'])).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
  });

  test('postgres:// builds a working backend and ends its pool on close()', async () => {
    const backend = await fromUrl('postgres://postgres@127.0.0.1:5432/test');
    expect(backend.name).toBe('postgres');
    const locks = createLocks(backend, { prefix: 'lh-url' });
    const lease = await locks.acquire('url-pg');
    expect(await lease.release()).toBe(true);
    await locks.close();
  });

  test('memory: needs no server', async () => {
    const locks = createLocks(await fromUrl('memory:'));
    expect((await locks.acquire('m')).fence).toBe(1n);
    await locks.close();
  });

  test.each([
    ['', InvalidArgumentError],
    ['not a url', InvalidArgumentError],
    ['ftp://127.0.0.1', InvalidArgumentError],
    ['zk://127.0.0.1:2181', LeaseholdError],
    ['etcd://127.0.0.1:2379', LeaseholdError],
  ])('%j is refused with a clear error', async (url, type) => {
    await expect(fromUrl(url)).rejects.toBeInstanceOf(type);
  });

  test('a password in the URL never appears in an error', async () => {
    const errs = await Promise.all([
      fromUrl('redis://user:s3cr3t-pw@127.0.0.1:1').catch((e: Error) => e),
      fromUrl('postgres://user:s3cr3t-pw@127.0.0.1:1/db').catch((e: Error) => e),
      fromUrl('redis://user:s3cr3t-pw@[bad').catch((e: Error) => e),
    ]);
    expect(errs[0]).toBeInstanceOf(BackendError);
    expect(errs[1]).toBeInstanceOf(BackendError);
    expect(errs[2]).toBeInstanceOf(InvalidArgumentError);
    for (const e of errs) {
      expect(String((e as Error).message)).not.toContain('s3cr3t');
      expect(String((e as Error).stack)).not.toContain('s3cr3t');
    }
    expect(redactUrl('rediss://u:p@h:1/0')).toBe('rediss://***@h:1/0');
  });
});
