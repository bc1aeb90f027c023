import { describe, expect, test } from 'vitest';
import { parseZkUrl } from '../../src/backends/zookeeper/url.js';
import { BackendError, createLocks, fromUrl, InvalidArgumentError } from '../../src/index.js';
import { call, rawClient } from '../support/zookeeper.js';

describe('fromUrl zk://', () => {
  test('an ensemble with a chroot builds a working backend whose close() ends its session', async () => {
    const chroot = `/lh-url-${process.pid}`;
    const admin = await rawClient('127.0.0.1:2191');
    try {
      await call((cb) => admin.mkdirp(chroot, cb));
      const backend = await fromUrl(`zk://127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193${chroot}?sessionTimeout=5s`);
      const locks = createLocks(backend, { prefix: 'url', ttl: '5s' });
      const lease = await locks.acquire('zk-url', { value: 'me' });
      expect(typeof lease.fence).toBe('bigint');
      // the lock lives under the chroot
      const dirs = await call<string[]>((cb) => admin.getChildren(`${chroot}/leasehold/locks`, cb));
      expect(dirs).toContain('url:zk-url');
      expect(await locks.inspect('zk-url')).toMatchObject({ fence: lease.fence, value: 'me' });
      const detached = await createLocks(backend, { prefix: 'url', ttl: '5s' }).tryAcquire('kept');
      expect(detached).not.toBeNull();
      await locks.close();
      // close() ended the session: its ephemeral nodes are gone at once
      const left = await call<string[]>((cb) => admin.getChildren(`${chroot}/leasehold/locks/url:kept`, cb)).catch(
        () => [],
      );
      expect(left).toEqual([]);
    } finally {
      await call((cb) => admin.removeRecursive(chroot, -1, cb)).catch(() => {});
      admin.close();
    }
  });

  test('nothing listening: a BackendError within connectTimeout', async () => {
    const t0 = performance.now();
    const err = await fromUrl('zk://127.0.0.1:1?connectTimeout=300ms').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect(performance.now() - t0).toBeLessThan(3000);
  });

  test.each([
    'zk://',
    'zk://user:pw@127.0.0.1:2181',
    'zk://127.0.0.1:2181/a b',
    'zk://127.0.0.1:2181?bogus=1',
    'zk://127.0.0.1:2181?suspendedIsLost=maybe',
    'zk://127.0.0.1:2181/../x',
    'zk://127.0.0.1:2181?sessionTimeout=1 fortnight',
  ])('%j is refused before connecting', async (url) => {
    const err = await fromUrl(url).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(String((err as Error).message)).not.toContain('pw@');
  });

  test('hosts without a port get 2181; options come from the query', () => {
    expect(parseZkUrl('zk://a,b:2182/apps/x?sessionTimeout=3000&suspendedIsLost=true')).toEqual({
      hosts: 'a:2181,b:2182/apps/x',
      options: { sessionTimeout: 3000, suspendedIsLost: true },
    });
  });
});
