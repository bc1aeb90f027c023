/** Free loopback ports for servers a test owns, asked of the OS (never a fixed port another run may hold). */
import { createServer } from 'node:net';

/**
 * A port that was free a moment ago: the OS picks it (listen on port 0), we close it and hand it
 * out. Ports are picked from the OS's ephemeral range, so another process is unlikely to take it
 * in the moment before the caller's server binds it; a test that loses that race fails loudly
 * ("port already in use"), it never talks to someone else's server.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

export async function freePorts(n: number): Promise<number[]> {
  const out = new Set<number>();
  while (out.size < n) out.add(await freePort());
  return [...out];
}
