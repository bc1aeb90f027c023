/**
 * A server that accepts the TCP connection and never answers the handshake (a member still
 * loading after a restart, a black hole): node-zookeeper-client stops its connect timer at the
 * TCP connect, so the client stayed CONNECTING on that socket forever and the backend was dead
 * for good. The adapter destroys a socket whose handshake is unanswered after sessionTimeout /
 * hosts, and the client connects again. A proxy in this process stands in for such a server.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { afterAll, describe, expect, test } from 'vitest';
import { connectZookeeper } from '../../src/backends/zookeeper/index.js';
import { createLocks, type Locks } from '../../src/index.js';
import { ZK_HOSTS } from '../support/zookeeper.js';
import { until } from '../support/until.js';

const target = Number(ZK_HOSTS.split(',')[0]!.split(':')[1] ?? 2181);

/** Forwards to ZooKeeper; while `blackhole`, new connections are accepted and never answered. */
class Silent {
  blackhole = false;
  readonly sockets = new Set<Socket>();
  /** Black-holed connections accepted, and how many of them the client closed. */
  holed = 0;
  holedClosed = 0;
  port = 0;
  private server: Server | null = null;

  async listen(): Promise<void> {
    const server = createServer((c) => {
      this.sockets.add(c);
      c.on('error', () => {});
      c.on('close', () => this.sockets.delete(c));
      if (this.blackhole) {
        this.holed++;
        c.on('close', () => this.holedClosed++);
        c.resume(); // read and drop: the handshake is never answered
        return;
      }
      const u = createConnection({ host: '127.0.0.1', port: target });
      this.sockets.add(u);
      u.on('error', () => c.destroy());
      u.on('close', () => (this.sockets.delete(u), c.destroy()));
      c.on('close', () => u.destroy());
      c.pipe(u).pipe(c);
    });
    this.server = server;
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    this.port = (server.address() as { port: number }).port;
  }

  resetAll(): void {
    for (const s of [...this.sockets]) s.destroy();
  }

  async close(): Promise<void> {
    this.resetAll();
    const s = this.server;
    if (s) await new Promise<void>((r) => s.close(() => r()));
  }
}

describe('zookeeper: an unanswered handshake', () => {
  const proxy = new Silent();
  let locks: Locks | null = null;

  afterAll(async () => {
    await locks?.close();
    await proxy.close();
  });

  test('the socket is dropped after sessionTimeout / hosts and the client connects again', async () => {
    await proxy.listen();
    const backend = await connectZookeeper(`127.0.0.1:${proxy.port}`, { sessionTimeout: 2000 });
    locks = createLocks(backend, { ttl: 2000, prefix: 'handshake' });
    const lease = await locks.acquire(`k-${process.pid}-1`);
    expect(lease.held).toBe(true);

    proxy.blackhole = true;
    proxy.resetAll(); // the client reconnects, into the black hole
    await until('a reconnect into the black hole', () => proxy.holed > 0, 5000);
    const stuckAt = performance.now();
    proxy.blackhole = false; // later connections are forwarded again

    // the unanswered socket is closed by the client within its connect timeout (2000 / 1 host)
    await until('the client to drop the unanswered socket', () => proxy.holedClosed > 0, 6000);
    expect(performance.now() - stuckAt).toBeLessThan(2000 + 1500);
    // and it reaches the server again: a session (the old one expired meanwhile: a new one)
    await until(
      'a connected session',
      () => backend.sessionState === 'CONNECTED' || backend.sessionState === 'RECONNECTED',
      10_000,
    );
    const later = await locks.tryAcquire(`k-${process.pid}-2`);
    expect(later?.held).toBe(true);
    expect(backend.sessionId).not.toBe('');
    await later?.release();
  }, 30_000);
});
