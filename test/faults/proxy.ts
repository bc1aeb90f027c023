/**
 * A loopback TCP proxy (node:net) between the workers' clients and one lock server, run in the
 * harness. Modes:
 *   pass       bytes flow at once
 *   delay      every chunk, both ways, is delivered `ms` later (order kept)
 *   hold       replies (server → client) are held; requests still reach the server, so it acts
 *              on them — the held replies are released late, in order, when the mode ends
 *   blackhole  nothing flows either way (new connections are accepted and starve too); when the
 *              mode ends every connection is reset, as a partition that outlived TCP's patience
 * and `reset()`: every current connection is reset (RST) at once.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export type ProxyMode = { kind: 'pass' } | { kind: 'delay'; ms: number } | { kind: 'hold' } | { kind: 'blackhole' };

const now = () => performance.now();

class Pipe {
  private readonly q: { buf: Buffer; due: number }[] = [];
  private timer: NodeJS.Timeout | null = null;
  constructor(
    private readonly to: Socket,
    private readonly proxy: Proxy,
    private readonly down: boolean,
  ) {}
  push(buf: Buffer): void {
    const m = this.proxy.mode;
    const due =
      m.kind === 'blackhole' || (m.kind === 'hold' && this.down) ? Infinity : m.kind === 'delay' ? now() + m.ms : now();
    this.q.push({ buf, due });
    this.pump();
  }
  /** Held chunks become due now (their order is kept). */
  release(): void {
    for (const x of this.q) if (x.due === Infinity) x.due = now();
    this.pump();
  }
  pump(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.q.length > 0 && this.q[0]!.due <= now()) {
      if (!this.to.destroyed) this.to.write(this.q.shift()!.buf);
      else this.q.shift();
    }
    const head = this.q[0];
    if (head && head.due !== Infinity) this.timer = setTimeout(() => this.pump(), Math.max(0, head.due - now()));
  }
  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.q.length = 0;
  }
}

interface Conn {
  client: Socket;
  server: Socket;
  up: Pipe;
  down: Pipe;
}

export class Proxy {
  mode: ProxyMode = { kind: 'pass' };
  port = 0;
  private server: Server | null = null;
  private readonly conns = new Set<Conn>();

  constructor(readonly targetPort: number) {}

  async listen(): Promise<number> {
    const server = createServer((client) => this.accept(client));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as { port: number }).port;
    return this.port;
  }

  private accept(client: Socket): void {
    const server = createConnection({ host: '127.0.0.1', port: this.targetPort });
    const conn: Conn = { client, server, up: new Pipe(server, this, false), down: new Pipe(client, this, true) };
    this.conns.add(conn);
    client.setNoDelay(true);
    server.setNoDelay(true);
    client.on('data', (d: Buffer) => conn.up.push(d));
    server.on('data', (d: Buffer) => conn.down.push(d));
    const end = () => {
      if (!this.conns.delete(conn)) return;
      conn.up.clear();
      conn.down.clear();
      client.destroy();
      server.destroy();
    };
    client.on('error', end);
    server.on('error', end);
    client.on('close', end);
    server.on('close', end);
  }

  get connections(): number {
    return this.conns.size;
  }

  setMode(mode: ProxyMode): void {
    const was = this.mode;
    this.mode = mode;
    if (was.kind === 'blackhole' && mode.kind !== 'blackhole') this.reset();
    else if (mode.kind === 'pass' || mode.kind === 'delay') {
      for (const c of this.conns) {
        c.up.release();
        c.down.release();
      }
    }
  }

  /** Resets (RST) every current connection. */
  reset(): void {
    for (const c of [...this.conns]) {
      this.conns.delete(c);
      c.up.clear();
      c.down.clear();
      c.client.resetAndDestroy();
      c.server.resetAndDestroy();
    }
  }

  async close(): Promise<void> {
    this.reset();
    const s = this.server;
    this.server = null;
    if (s) await new Promise<void>((r) => s.close(() => r()));
  }
}
