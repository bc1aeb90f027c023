/**
 * A TCP relay in front of the real server, to make network faults without mocking Postgres:
 * `freeze()` stops relaying in both directions — bytes, FINs and resets — without closing
 * anything (a half-open connection as either side sees it); `cut()` resets every relayed
 * connection, so the server notices its clients are gone.
 */
import net from 'node:net';

export class Relay {
  private readonly server: net.Server;
  private readonly pairs = new Set<[net.Socket, net.Socket]>();
  private frozen = false;
  port = 0;

  constructor(
    private readonly host = '127.0.0.1',
    private readonly upstreamPort = 5432,
  ) {
    this.server = net.createServer((client) => {
      const upstream = net.connect(this.upstreamPort, this.host);
      const pair: [net.Socket, net.Socket] = [client, upstream];
      this.pairs.add(pair);
      const drop = () => {
        if (this.frozen) return; // a black hole: not even a FIN or RST gets through
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      client.on('data', (d) => {
        if (!this.frozen) upstream.write(d);
      });
      upstream.on('data', (d) => {
        if (!this.frozen) client.write(d);
      });
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as net.AddressInfo).port;
    return this;
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/test`;
  }

  /** Drops every byte from now on, in both directions, keeping the sockets open. */
  freeze(): void {
    this.frozen = true;
  }

  /** Resets every relayed connection (the server sees its clients vanish). */
  cut(): void {
    this.frozen = false;
    for (const [a, b] of this.pairs) {
      a.resetAndDestroy();
      b.resetAndDestroy();
    }
    this.pairs.clear();
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
