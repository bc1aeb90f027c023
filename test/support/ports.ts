/** Free loopback ports for servers a test owns (never a fixed port another run may hold). */
import { createServer } from 'node:net';

/**
 * Ports are picked below the OS's ephemeral range (32768–60999 here), not asked of the OS with
 * `listen(0)`. A port the OS hands out is in that range, and so is the local port of every
 * outgoing connection: with thousands of client connections a second from the other test files,
 * a connect() could take the port in the moment between our check and the server's bind, or while
 * a fault test has the server stopped for a restart on the same port. (Linux even gives connect()
 * the odd ports and bind(0) the even ones, so the "+1" peer port of an etcd member was the likely
 * one to go.) Below the range only listeners take ports, and each test worker draws from its own
 * slice of it (VITEST_POOL_ID), so two files never race for one port either.
 *
 * A port is handed out once per process, after a bind to it succeeded. A test that still loses a
 * race fails loudly ("address already in use"); it never talks to someone else's server.
 */
const LOW = 10_000; // + 10,000 (a Redis Cluster bus port) stays below the ephemeral range
const HIGH = 22_700;
/** Fixed ports of scripts/services.sh and the machine's services in [LOW, HIGH + 10,000). */
const RESERVED = new Set([15672, 17301, 17302, 17303, 17304, 17305, 17306, 25672, 27311, 27312, 27313]);
const SLICES = 4;
const given = new Set<number>();

function slice(): [number, number] {
  const id = Number(process.env.VITEST_POOL_ID ?? process.env.VITEST_WORKER_ID ?? 1);
  const size = Math.floor((HIGH - LOW) / SLICES);
  const from = LOW + ((Number.isFinite(id) && id > 0 ? id - 1 : 0) % SLICES) * size;
  return [from, from + size];
}

/** Whether a listener can bind 127.0.0.1:port right now. */
export function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A base port with `n` consecutive ports after it that were all free a moment ago and were not
 * handed out before by this process (`freePort()` is `freeRun(1)`). With `bus`, port + 10,000 is
 * free too for each of them (a Redis Cluster node's bus port).
 */
export async function freeRun(n: number, opts: { bus?: boolean } = {}): Promise<number> {
  const [from, to] = slice();
  for (let tries = 0; tries < 10_000; tries++) {
    const base = from + Math.floor(Math.random() * (to - from - n));
    let ok = true;
    for (let i = 0; i < n && ok; i++) {
      const p = base + i;
      ok =
        !given.has(p) &&
        !RESERVED.has(p) &&
        (await portFree(p)) &&
        (!opts.bus || (!RESERVED.has(p + 10_000) && (await portFree(p + 10_000))));
    }
    if (ok) {
      for (let i = 0; i < n; i++) given.add(base + i);
      return base;
    }
  }
  throw new Error(`no run of ${n} free ports in ${from}–${to}`);
}

export function freePort(): Promise<number> {
  return freeRun(1);
}

export async function freePorts(n: number): Promise<number[]> {
  const out: number[] = [];
  while (out.length < n) out.push(await freePort());
  return out;
}
