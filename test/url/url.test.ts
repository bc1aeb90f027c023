/** fromUrl against the real servers. */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import net from 'node:net';
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
import { CONNECT_MS } from '../../src/redis-urls.js';
import { freePorts } from '../support/ports.js';

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

  test('?session=1 on redis:// and redis+sentinel:// turns on session renewal; the client never sees it', async () => {
    const { SENTINEL_URL } = await import('../support/sentinel.js');
    const { healed } = await import('../support/failover.js');
    await healed('sentinel');
    for (const url of ['redis://127.0.0.1:6379/11?session=1', `${SENTINEL_URL}?session=true`]) {
      const backend = await fromUrl(url);
      const locks = createLocks(backend, { prefix: 'lh-url-session' });
      try {
        expect(typeof backend.renewSessions).toBe('function');
        const lease = await locks.acquire('s-key');
        expect(lease.fence).toBeGreaterThan(0n);
        await lease.release();
      } finally {
        await locks.close();
      }
    }
    const plain = await fromUrl('redis://127.0.0.1:6379/11?session=0');
    expect(plain.renewSessions).toBeUndefined();
    await plain.close();
  });

  test('a bad ?session= value or an unknown parameter on a cluster/sentinel URL is refused before any I/O', async () => {
    // port 1: nothing listens there, so a BackendError would mean the URL reached a connect
    for (const url of [
      'redis://127.0.0.1:1?session=yes',
      'redis+sentinel://127.0.0.1:1/m?session=2',
      'redis+sentinel://127.0.0.1:1/m?sesion=1',
      'redis+sentinel://127.0.0.1:1/%zz', // a bad %-escape in the master name (was a URIError)
      'redis+cluster://127.0.0.1:1?session=1',
      'redis+cluster://127.0.0.1:1?foo=bar',
    ]) {
      const err = await fromUrl(url).catch((e: unknown) => e);
      expect(err, url).toBeInstanceOf(InvalidArgumentError);
    }
    const err = (await fromUrl('redis+cluster://127.0.0.1:1?session=1').catch((e: unknown) => e)) as Error;
    expect(err.message).toMatch(/single server or Sentinel/);
  });

  test('a password with ?, # or / unescaped in a cluster/sentinel URL is its own; no error quotes any of it', async () => {
    const { parseRedisDeployment } = await import('../../src/redis-urls.js');
    const d = parseRedisDeployment('redis+sentinel://u:pa?s#s/w@127.0.0.1:26379/m?session=1');
    expect(d).toMatchObject({ username: 'u', password: 'pa?s#s/w', name: 'm', session: true });
    expect(d.nodes).toEqual([{ host: '127.0.0.1', port: 26379 }]);
    // port 0: refused before any I/O, whatever the password holds
    for (const [url, secret] of [
      ['redis+cluster://user:S3cr?tPassw0rd@127.0.0.1:0', 'tPassw0rd'],
      ['redis+sentinel://:Xy?session=hunter2@127.0.0.1:0', 'hunter2'],
      ['redis+sentinel://:ab#cdSecret@127.0.0.1:0', 'cdSecret'],
    ]) {
      const err = (await fromUrl(url!).catch((e: unknown) => e)) as Error;
      expect(err, url).toBeInstanceOf(InvalidArgumentError);
      expect(err.message, url).not.toContain(secret);
      expect(err.message, url).toMatch(/is not host:port/);
    }
  });

  test('a redis:// path other than a database number is refused before any I/O; a database the server lacks rejects', async () => {
    // port 1: nothing listens there, so a BackendError would mean the URL reached a connect
    for (const url of [
      'redis://127.0.0.1:1/abc',
      'redis://:pw@127.0.0.1:1/1x',
      'redis://127.0.0.1:1/-1',
      'redis://127.0.0.1:1/1/2',
    ]) {
      const err = await fromUrl(url).catch((e: unknown) => e);
      expect(err, url).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toMatch(/database number/);
    }
    // a server with 16 databases has no 99: before, every lock silently went to database 0
    admin ??= await clients.make('ioredis');
    // connections opened since, whose last command was a SELECT (the one it sent): none is left
    const selects = async (after: number) =>
      String(await admin.client('LIST'))
        .split('\n')
        .filter((l) => / cmd=select /.test(l) && Number(/\bid=(\d+)\b/.exec(l)?.[1]) > after);
    const last = Number(await admin.client('ID'));
    const err = await fromUrl('redis://127.0.0.1:6379/99').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as Error).message).toMatch(/DB index is out of range/);
    const lingering = () => selects(last);
    for (let i = 0; i < 50 && (await lingering()).length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await lingering()).toEqual([]);
    // a database it has works as before
    const b = await fromUrl('redis://127.0.0.1:6379/11');
    await b.close();
  });

  test('a redis+sentinel:// URL whose sentinels do not answer is a BackendError within the connect bound', async () => {
    // before, the Sentinel client retried the unreachable sentinel forever and fromUrl never settled
    const t0 = performance.now();
    const err = (await fromUrl('redis+sentinel://127.0.0.1:1/mymaster').catch((e: unknown) => e)) as Error;
    expect(err).toBeInstanceOf(BackendError);
    expect(err.message).toMatch(/redis\+sentinel:\/\/127\.0\.0\.1:1\/mymaster/);
    expect(performance.now() - t0).toBeLessThan(CONNECT_MS + 2000);
  }, 20_000);

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

  test('Redlock opens with a minority of nodes down, which rejoin when they answer; a majority down fails with every client closed', async () => {
    // before, one node down of three failed the whole fromUrl: Redlock, built to survive a
    // minority down, could not even start
    const [late, gone1, gone2] = await freePorts(3);
    const node1 = await clients.make('ioredis', 'redis://127.0.0.1:7001');
    const onNode1 = async () => {
      const list: string = await node1.client('LIST');
      return list.split('\n').filter((l) => / db=11 /.test(l)).length;
    };
    const warnings: string[] = [];
    const onWarning = (m: unknown) => warnings.push((m as { message: string }).message);
    subscribe('leasehold:warning', onWarning);
    let proxied = 0;
    const proxy = net.createServer((socket) => {
      proxied++;
      const up = net.connect(7003, '127.0.0.1');
      socket.pipe(up).pipe(socket);
      const end = () => (socket.destroy(), up.destroy());
      for (const s of [socket, up]) s.on('error', end).on('close', end);
    });
    try {
      const backend = await fromUrl([
        'redis://127.0.0.1:7001/11',
        'redis://127.0.0.1:7002/11',
        `redis://u:S3cretPw@127.0.0.1:${late}/11`,
      ]);
      expect(backend.name).toBe('redlock');
      expect(warnings).toEqual([
        `redlock: could not connect to redis://***@127.0.0.1:${late}/11: connect ECONNREFUSED 127.0.0.1:${late}; going on with 2 of 3 nodes (it rejoins when it answers)`,
      ]);
      const locks = createLocks(backend, { prefix: 'lh-url' });
      expect(await (await locks.acquire('url-redlock-minority')).release()).toBe(true);
      // the node comes up (a proxy to 7003 on its port): the kept client connects to it
      await new Promise<void>((resolve) => proxy.listen(late, '127.0.0.1', resolve));
      await expect.poll(() => proxied, { timeout: 5000 }).toBeGreaterThan(0);
      await locks.close();

      const before = await onNode1();
      const e = await fromUrl([
        'redis://127.0.0.1:7001/11',
        `redis://127.0.0.1:${gone1}/11`,
        `redis://127.0.0.1:${gone2}/11`,
      ]).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(BackendError);
      expect((e as Error).message).toMatch(/could not connect to redis:\/\/127\.0\.0\.1:\d+\/11/);
      await expect.poll(onNode1, { timeout: 2000 }).toBe(before); // the node that answered: closed
    } finally {
      unsubscribe('leasehold:warning', onWarning);
      await new Promise((resolve) => proxy.close(resolve));
    }
  }, 20_000);

  test('a Redlock node URL whose path is not a database number is refused before any connection', async () => {
    // a listener that counts connections and drops each at once: before, the nodes were connected to
    let connections = 0;
    const node = net.createServer((socket) => {
      connections++;
      socket.destroy();
    });
    const [a, b, c] = await freePorts(3);
    await new Promise<void>((resolve) => node.listen(a, '127.0.0.1', resolve));
    try {
      for (const [urls, i] of [
        [[`redis://127.0.0.1:${a}`, `redis://127.0.0.1:${b}/abc`, `redis://127.0.0.1:${c}`], 1],
        [[`redis://:S3CRETpw@127.0.0.1:${a}/1x`, `redis://127.0.0.1:${b}/2`, `redis://127.0.0.1:${c}`], 0],
        [[`redis://127.0.0.1:${a}`, `redis://127.0.0.1:${b}`, `rediss://127.0.0.1:${c}/1/2`], 2],
      ] as const) {
        const err = await fromUrl(urls).catch((e: unknown) => e);
        expect(err, urls.join(' ')).toBeInstanceOf(InvalidArgumentError);
        expect((err as Error).message).toMatch(new RegExp(`database number .* in url\\[${i}\\]`));
        expect((err as Error).message).not.toMatch(/S3CRETpw/);
      }
      expect(connections).toBe(0);
    } finally {
      await new Promise((resolve) => node.close(resolve));
    }
  });

  test('a Redlock node whose database the server does not have fails the open, naming the node, with every client closed', async () => {
    // before, the refused SELECT was an error event only, and that node's locks went to database 0
    const node2 = await clients.make('ioredis', 'redis://127.0.0.1:7002');
    const before = Number(await node2.client('ID'));
    const urls = ['redis://127.0.0.1:7001/11', 'redis://:S3CRETpw@127.0.0.1:7002/99', 'redis://127.0.0.1:7003/11'];
    const err = await fromUrl(urls).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as Error).message).toMatch(/127\.0\.0\.1:7002\/99.*DB index is out of range/);
    expect((err as Error).message).not.toMatch(/S3CRETpw/);
    // no connection of this open, whose last command was the refused SELECT, is left on the node
    const left = async () =>
      String(await node2.client('LIST'))
        .split('\n')
        .filter((l) => / cmd=select /.test(l) && Number(/\bid=(\d+)\b/.exec(l)?.[1]) > before);
    for (let i = 0; i < 50 && (await left()).length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await left()).toEqual([]);
  });

  test('Redlock URLs naming one node twice (normalised host:port) are refused before any connection', async () => {
    // a listener that counts connections and drops each at once: a connect fails fast, never hangs
    let connections = 0;
    const node = net.createServer((socket) => {
      connections++;
      socket.destroy();
    });
    const [port, closed] = await freePorts(2); // nothing listens on `closed`: a connect there is a BackendError
    await new Promise<void>((resolve) => node.listen(port, '127.0.0.1', resolve));
    try {
      for (const [urls, pair] of [
        [[`redis://127.0.0.1:${port}`, `redis://127.0.0.1:${port}/1`, `redis://127.0.0.1:${closed}`], '1] and url[0'],
        [[`redis://LOCALHOST:${port}`, `redis://localhost:${closed}`, `redis://localhost:${port}`], '2] and url[0'],
        [[`redis://127.0.0.1:${closed}`, `redis://127.0.0.1`, `redis://127.0.0.1:6379/2`], '2] and url[1'],
        [[`redis://[::1]:${closed}`, `redis://127.0.0.1:${port}`, `rediss://[0:0::1]:${closed}`], '2] and url[0'],
      ] as const) {
        const e = await fromUrl(urls).catch((x: unknown) => x);
        expect(e).toBeInstanceOf(InvalidArgumentError);
        expect((e as Error).message).toContain(`url[${pair}] both point at`);
      }
      expect(connections).toBe(0); // no client was opened, so none is left open
    } finally {
      await new Promise((resolve) => node.close(resolve));
    }
  });

  test('postgres:// builds a working backend and ends its pool on close()', async () => {
    const backend = await fromUrl('postgres://postgres@127.0.0.1:5432/test');
    expect(backend.name).toBe('postgres');
    const locks = createLocks(backend, { prefix: 'lh-url' });
    const lease = await locks.acquire('url-pg');
    expect(await lease.release()).toBe(true);
    await locks.close();
  });

  test('etcd:// with several members builds one client, in a namespace; close() closes it', async () => {
    const backend = await fromUrl('etcd://127.0.0.1:2479,127.0.0.1:2481,127.0.0.1:2483/lh-url-ns/?leaseTtl=3s');
    expect(backend.name).toBe('etcd');
    const locks = createLocks(backend, { prefix: 'lh-url' });
    const lease = await locks.acquire('url-etcd');
    expect(lease.fence).toBeGreaterThan(0n);
    expect(await locks.inspect('url-etcd')).toMatchObject({ fence: lease.fence });
    expect(await lease.release()).toBe(true);
    await locks.close();
    expect(String(backend)).not.toContain('2479');
  });

  test('etcd:// to a port where nothing listens fails with a BackendError, password hidden', async () => {
    const e = await fromUrl('etcd://root:s3cr3t-pw@127.0.0.1:1').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(BackendError);
    expect(`${(e as Error).message} ${(e as Error).stack}`).not.toContain('s3cr3t');
  }, 15_000);

  test('memory: needs no server, and takes nothing after the scheme', async () => {
    const locks = createLocks(await fromUrl('memory:'));
    expect((await locks.acquire('m')).fence).toBe(1n);
    await locks.close();
    await (await fromUrl('memory://')).close();
    // before, anything after memory: was ignored (a typo such as memory:shared looked meaningful)
    for (const u of ['memory:foo', 'memory://host:1/x?y=1#z', 'memory:?shared=1'])
      await expect(fromUrl(u), u).rejects.toThrow(/a memory: URL takes nothing after the scheme/);
  });

  test.each([
    ['', InvalidArgumentError],
    ['not a url', InvalidArgumentError],
    ['ftp://127.0.0.1', InvalidArgumentError],
    ['etcd://127.0.0.1:2379,', InvalidArgumentError],
    ['etcd://127.0.0.1:2379?ttl=5s', InvalidArgumentError],
    ['etcd://127.0.0.1:99999', InvalidArgumentError],
    ['etcd://127.0.0.1:2379?leaseTtl=1s', InvalidArgumentError],
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

  test.each([
    ['redis://user:s3cret@h:1/0', 'redis://***@h:1/0'],
    ['redis://user:pa#ss3cret@127.0.0.1:1/', 'redis://***@127.0.0.1:1/'],
    ['redis://user:pa/ss3cret@127.0.0.1:1/', 'redis://***@127.0.0.1:1/'],
    ['redis://user:pa?ss3cret@127.0.0.1:1/', 'redis://***@127.0.0.1:1/'],
    ['redis://user:pa@ss3cret@127.0.0.1:1/', 'redis://***@127.0.0.1:1/'],
    ['redis://u:12/ss3cret@host/', 'redis://***@host/'], // parses, with "ss3cret@host/" as a path
    ['redis://:p%40ss3cret@h:1/0', 'redis://***@h:1/0'],
    ['postgres://u:p@[bad/db', 'postgres://***@[bad/db'],
    ['postgres://h/db?user=u&password=ss3cret&x=1', 'postgres://h/db?user=u&password=***&x=1'],
    ['redis:user:ss3cret@host', 'redis:***@host'],
    ['redis://127.0.0.1:6379', 'redis://127.0.0.1:6379'],
  ])('redactUrl(%j) hides the password: %j', (url, shown) => {
    expect(redactUrl(url)).toBe(shown);
  });

  test('issue #9.4: a raw "#" in the password is in no error message of fromUrl', async () => {
    const e = await fromUrl('redis://user:pa#ss3cret@127.0.0.1:1/').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(LeaseholdError);
    expect(`${(e as Error).message} ${(e as Error).stack} ${String((e as Error).cause)}`).not.toMatch(/ss3cret/);
  });
});
