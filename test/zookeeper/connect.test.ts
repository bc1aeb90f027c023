/**
 * The connection strings of clients leasehold makes (`connectZookeeper`, `zk://`) are checked
 * before any I/O: a bad port used to end the process (node-zookeeper-client's socket threw a
 * RangeError from a timer), a bad chroot threw the client's AssertionError, and a connect
 * timeout was a plain Error.
 */
import { createRequire } from 'node:module';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { BackendError, fromUrl, InvalidArgumentError } from '../../src/index.js';

// node-zookeeper-client opens its sockets with the CommonJS `net.connect`: counted here
const net = createRequire(import.meta.url)('node:net') as { connect: (...a: unknown[]) => unknown };
const realConnect = net.connect;
let sockets = 0;
beforeEach(() => {
  sockets = 0;
  net.connect = (...a: unknown[]) => {
    sockets++;
    return realConnect.apply(net, a);
  };
});
afterEach(() => {
  net.connect = realConnect;
});

const refused = async (p: Promise<unknown>) => {
  const err = await p.then(
    (b) => {
      void (b as { close?: () => Promise<void> })?.close?.();
      return b;
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(InvalidArgumentError);
  expect(sockets).toBe(0);
  return err as InvalidArgumentError;
};

describe('connectZookeeper: hosts are checked before any I/O', () => {
  test.each([
    '127.0.0.1:abc',
    '127.0.0.1:99999',
    '127.0.0.1:65536',
    '127.0.0.1:0',
    '127.0.0.1:',
    '127.0.0.1:+80',
    '127.0.0.1:2181,127.0.0.1:1e3',
    '127.0.0.1:2181:2182',
  ])('bad port %j → InvalidArgumentError', async (hosts) => {
    const err = await refused(connectZookeeper(hosts, { connectTimeout: '1s' }));
    expect(err.message).toMatch(/port|host/);
  });

  test.each(['[::1]:2181', '127.0.0.1:2181,[::1]'])(
    'an IPv6 address %j (the client cannot dial one) → InvalidArgumentError',
    async (hosts) => {
      const err = await refused(connectZookeeper(hosts, { connectTimeout: '1s' }));
      expect(err.message).toMatch(/cannot connect to an IPv6 address/);
    },
  );

  test.each(['127.0.0.1:2181/a/', '127.0.0.1:2181//a', '127.0.0.1:2181/a/../b'])(
    'bad chroot %j → InvalidArgumentError',
    async (hosts) => {
      await refused(connectZookeeper(hosts, { connectTimeout: '1s' }));
    },
  );
});

describe('zk:// URLs: ports are checked before any I/O', () => {
  test.each(['zk://127.0.0.1:99999', 'zk://127.0.0.1:0', 'zk://a:2181,b:65536/apps'])(
    '%j → InvalidArgumentError',
    async (url) => {
      await refused(fromUrl(url));
    },
  );
});

// last: the client it gave up on may still make one more connection attempt after close()
describe('connectZookeeper: connect timeout', () => {
  test('nothing listening: a BackendError after connectTimeout', async () => {
    const t0 = performance.now();
    const err = await connectZookeeper('127.0.0.1:1', { connectTimeout: '1s' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as Error).message).toContain('connectTimeout');
    expect(performance.now() - t0).toBeLessThan(3000);
  });
});
