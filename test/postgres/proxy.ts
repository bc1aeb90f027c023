/**
 * A TCP relay in front of the real server, to make network faults without mocking Postgres:
 * `freeze()` stops relaying in both directions — bytes, FINs and resets — without closing
 * anything (a half-open connection as either side sees it); `cut()` resets every relayed
 * connection, so the server notices its clients are gone. `blackhole()` does what `freeze()` does
 * to one connection (or drops only the server's answers on it).
 */
import net from 'node:net';

export class Relay {
  private readonly server: net.Server;
  private readonly pairs = new Set<[net.Socket, net.Socket]>();
  /** Connections blackholed one by one (their upstream socket), and whether the client's bytes still go. */
  private readonly silenced = new Map<net.Socket, { requests: boolean }>();
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
        if (this.frozen || this.silenced.has(upstream)) return; // a black hole: not even a FIN or RST gets through
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      client.on('data', (d) => {
        if (!this.frozen && (this.silenced.get(upstream)?.requests ?? true)) upstream.write(d);
      });
      upstream.on('data', (d) => {
        if (!this.frozen && !this.silenced.has(upstream)) client.write(d);
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

  /**
   * Drops every byte of the one connection whose server-side socket has local port `port` (the
   * server's `pg_stat_activity.client_port`), keeping its sockets open: in both directions, or
   * (`answersOnly`) only the server's answers. False when no such connection is relayed.
   */
  blackhole(port: number, answersOnly = false): boolean {
    for (const [, upstream] of this.pairs) {
      if (upstream.localPort !== port) continue;
      this.silenced.set(upstream, { requests: answersOnly });
      return true;
    }
    return false;
  }

  /** Resets every relayed connection (the server sees its clients vanish). */
  cut(): void {
    this.frozen = false;
    for (const [a, b] of this.pairs) {
      a.resetAndDestroy();
      b.resetAndDestroy();
    }
    this.pairs.clear();
    this.silenced.clear();
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
