/** Options of `redlock(clients, opts)`, validated before any I/O. */
import { type Duration, toMs } from '../../duration.js';
import { InvalidArgumentError } from '../../errors.js';
import { redactUrl } from '../../scrub.js';
import { checkOptions } from '../../validate.js';
import { adapt } from '../redis/adapt.js';
import type { RedisAdapter } from '../redis/client.js';

export interface RedlockOptions {
  /** Clock drift allowed per ms of TTL (default 0.01): validity = ttl − elapsed − drift. */
  readonly driftFactor?: number;
  /** Constant added to the drift, in ms (default 2). */
  readonly driftMs?: number;
  /** Accept 1 or 2 nodes. Off by default: Redlock without independent majorities means nothing. */
  readonly allowFewerThanThree?: boolean;
  /** Longest wait for one node's reply before it counts as failed (default 500ms). */
  readonly nodeTimeout?: Duration;
  /** Longest wait between polls when no node could be subscribed to (default 250ms). */
  readonly pollInterval?: Duration;
  /**
   * How long a key's fence counter outlives its last grant or renewal on a node (default 24h, at
   * least 1s). A counter that is gone is seeded from the node's clock (TIME in µs), so fences keep
   * increasing while that clock does not step back by more than this (docs/redlock.md).
   */
  readonly fenceIdle?: Duration;
}

export interface RedlockConfig {
  readonly driftFactor: number;
  readonly driftMs: number;
  readonly nodeTimeoutMs: number;
  readonly pollMs: number;
  readonly fenceIdleMs: number;
}

export interface NodeHandle {
  readonly adapter: RedisAdapter;
  readonly label: string;
}

const KNOWN = ['driftFactor', 'driftMs', 'allowFewerThanThree', 'nodeTimeout', 'pollInterval', 'fenceIdle'];

export function parseOptions(opts: unknown): RedlockConfig & { allowFewerThanThree: boolean } {
  const o = checkOptions<Record<string, unknown>>(opts, KNOWN, 'redlock');
  const driftFactor = o.driftFactor ?? 0.01;
  if (typeof driftFactor !== 'number' || !Number.isFinite(driftFactor) || driftFactor < 0 || driftFactor >= 1) {
    throw new InvalidArgumentError(`redlock: driftFactor must be a number in [0, 1), got ${String(o.driftFactor)}`);
  }
  const driftMs = o.driftMs ?? 2;
  if (typeof driftMs !== 'number' || !Number.isFinite(driftMs) || driftMs < 0) {
    throw new InvalidArgumentError(`redlock: driftMs must be a number ≥ 0, got ${String(o.driftMs)}`);
  }
  const allow = o.allowFewerThanThree ?? false;
  if (typeof allow !== 'boolean') {
    throw new InvalidArgumentError(`redlock: allowFewerThanThree must be a boolean, got ${String(allow)}`);
  }
  const fenceIdleMs = toMs(o.fenceIdle ?? '24h', 'redlock: fenceIdle');
  if (fenceIdleMs < 1000) {
    throw new InvalidArgumentError(`redlock: fenceIdle must be at least 1s, got ${String(o.fenceIdle)}`);
  }
  return {
    driftFactor,
    fenceIdleMs,
    driftMs,
    allowFewerThanThree: allow,
    nodeTimeoutMs: toMs(o.nodeTimeout ?? 500, 'redlock: nodeTimeout'),
    pollMs: toMs(o.pollInterval ?? 250, 'redlock: pollInterval'),
  };
}

function address(client: any): string | undefined {
  const o = client?.options;
  if (typeof o?.path === 'string') return o.path;
  if (typeof o?.socket?.path === 'string') return o.socket.path;
  let host = o?.host ?? o?.socket?.host;
  let port = o?.port ?? o?.socket?.port;
  // a label shows up in errors: never a password
  if ((host === undefined || port === undefined) && typeof o?.url === 'string') return redactUrl(o.url);
  if (o === undefined || o === null) return undefined;
  // node-redis leaves what it defaults out of its options (it fills in localhost:6379 only when it
  // connects): two clients of one node that both rely on a default must still compare equal
  host ??= 'localhost';
  port ??= 6379;
  // host names are case-insensitive (as fromUrl compares them): LOCALHOST and localhost are one node
  return `${String(host).toLowerCase()}:${String(port)}`;
}

/** Adapts every client; refuses duplicates (one node counted twice fakes a majority). */
export function parseClients(clients: unknown, allowFewerThanThree: boolean): NodeHandle[] {
  if (!Array.isArray(clients)) {
    throw new InvalidArgumentError('redlock: clients must be an array of ioredis or node-redis clients');
  }
  if (clients.length === 0) throw new InvalidArgumentError('redlock: at least one client is required');
  if (clients.length < 3 && !allowFewerThanThree) {
    throw new InvalidArgumentError(
      `redlock: ${clients.length} node(s) given; Redlock needs at least 3 independent Redis masters to tolerate ` +
        'a failure (with fewer, use the single-node `redis()` backend, or pass allowFewerThanThree: true)',
    );
  }
  const seen = new Set<unknown>();
  const addresses = new Map<string, number>();
  return clients.map((client, i) => {
    if (seen.has(client)) throw new InvalidArgumentError(`redlock: clients[${i}] is the same client as an earlier one`);
    seen.add(client);
    const adapter = adapt(client, `redlock: clients[${i}]`);
    const addr = address(client);
    if (addr !== undefined) {
      const j = addresses.get(addr);
      if (j !== undefined) {
        throw new InvalidArgumentError(`redlock: clients[${i}] and clients[${j}] both point at ${addr}`);
      }
      addresses.set(addr, i);
    }
    return { adapter, label: `redlock node ${i}${addr ? ` (${addr})` : ''}` };
  });
}
