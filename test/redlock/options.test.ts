/** Argument checks: every bad input is refused with InvalidArgumentError before any I/O. */
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, describe, expect, it } from 'vitest';
import { redlock } from '../../src/backends/redlock/index.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { clients, closeClients, type AnyClient, requireShared, SHARED_PORTS } from './nodes.js';

/** Clients that never connect unless a command is sent: their status proves no I/O happened. */
const lazy = (ports: number[]) =>
  ports.map((port) => {
    const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true });
    c.on('error', () => {});
    return c;
  });

describe('redlock(clients, opts) validation', () => {
  const made: AnyClient[] = [];
  afterAll(() => closeClients(made));

  it('refuses fewer than 3 nodes unless explicitly allowed', () => {
    const two = lazy([7001, 7002]);
    expect(() => redlock(two)).toThrow(InvalidArgumentError);
    expect(() => redlock(two)).toThrow(/at least 3 independent/);
    expect(() => redlock(two.slice(0, 1))).toThrow(InvalidArgumentError);
    expect(() => redlock([])).toThrow(InvalidArgumentError);
    expect(() => redlock(two, { allowFewerThanThree: true })).not.toThrow();
    expect(two.every((c) => c.status === 'wait')).toBe(true);
  });

  it('refuses unknown and malformed options', () => {
    const cs = lazy([7001, 7002, 7003]);
    expect(() => redlock(cs, { retryCount: 3 } as never)).toThrow(/unknown option "retryCount"/);
    expect(() => redlock(cs, { driftFactor: -1 })).toThrow(InvalidArgumentError);
    expect(() => redlock(cs, { driftFactor: 1 })).toThrow(InvalidArgumentError);
    expect(() => redlock(cs, { driftFactor: Number.NaN })).toThrow(InvalidArgumentError);
    expect(() => redlock(cs, { driftMs: -2 })).toThrow(InvalidArgumentError);
    expect(() => redlock(cs, { allowFewerThanThree: 'yes' } as never)).toThrow(InvalidArgumentError);
    expect(() => redlock(cs, { nodeTimeout: 'soon' })).toThrow(InvalidArgumentError);
    expect(() => redlock(cs, { nodeTimeout: 0 })).toThrow(InvalidArgumentError);
    expect(() => redlock(cs, null as never)).toThrow(InvalidArgumentError);
    expect(() => redlock(cs, { fenceIdle: '500ms' })).toThrow(/fenceIdle must be at least 1s/);
    expect(() => redlock(cs, { fenceIdle: -1 })).toThrow(InvalidArgumentError);
    expect(() =>
      redlock(cs, { nodeTimeout: '250ms', pollInterval: '1s', driftFactor: 0, driftMs: 0, fenceIdle: '1h' }),
    ).not.toThrow();
    expect(cs.every((c) => c.status === 'wait')).toBe(true);
  });

  it('refuses non-clients and the same node twice (one node counted twice fakes a majority)', () => {
    const cs = lazy([7001, 7002, 7003]);
    expect(() => redlock('redis://x' as never)).toThrow(InvalidArgumentError);
    // a JavaScript caller gets past the types: the runtime check names the bad entry
    expect(() => redlock([cs[0]!, cs[1]!, {} as never])).toThrow(/clients\[2\]/);
    expect(() => redlock([cs[0]!, cs[1]!, cs[0]!])).toThrow(/same client/);
    expect(() => redlock([cs[0]!, cs[1]!, ...lazy([7001])])).toThrow(/both point at 127\.0\.0\.1:7001/);
  });

  it('refuses two clients of one node that leave the host or port to the defaults or spell the host differently', () => {
    // node-redis fills in localhost:6379 only when it connects: its options say nothing
    const nr = (socket?: { host?: string; port?: number }) => createClient(socket ? { socket } : {});
    const other = nr({ host: '127.0.0.1', port: 7002 });
    expect(() => redlock([nr({ port: 7001 }), nr({ port: 7001 }), other] as never)).toThrow(
      /both point at localhost:7001/,
    );
    expect(() => redlock([nr(), nr(), other] as never)).toThrow(/both point at localhost:6379/);
    expect(() => redlock([nr({ host: 'localhost' }), nr(), other] as never)).toThrow(/both point at localhost:6379/);
    // host names compare without case, as fromUrl compares them
    const io = (host: string) => new Redis({ host, port: 7001, lazyConnect: true });
    expect(() => redlock([io('LOCALHOST'), io('localhost'), other] as never)).toThrow(/both point at localhost:7001/);
    expect(() => redlock([io('LocalHost'), nr({ port: 7001 }), other] as never)).toThrow(
      /both point at localhost:7001/,
    );
    // as fromUrl: localhost and 127.0.0.1 are two names, never resolved
    expect(() => redlock([nr({ port: 7001 }), nr({ host: '127.0.0.1', port: 7001 }), other] as never)).not.toThrow();
  });

  it('refuses bad requests before sending anything', async () => {
    const cs = lazy([7001, 7002, 7003]);
    const b = redlock(cs);
    await expect(b.acquire('k', { token: '', ttlMs: 1000 })).rejects.toThrow(InvalidArgumentError);
    await expect(b.acquire('k', { token: 't', ttlMs: 0 })).rejects.toThrow(InvalidArgumentError);
    await expect(b.acquire('k', { token: 't', ttlMs: 1.5 })).rejects.toThrow(InvalidArgumentError);
    // 2ms of TTL is all drift: the lease could never be valid.
    await expect(b.acquire('k', { token: 't', ttlMs: 2 })).rejects.toThrow(/no validity/);
    await expect(b.acquire('k', { token: 't', ttlMs: 1000, value: 42 as never })).rejects.toThrow(
      /value must be a string/,
    );
    await expect(b.results!.put('k', '', 'v', 1000)).rejects.toThrow(InvalidArgumentError);
    await expect(b.results!.put('k', 't', 'v', 0)).rejects.toThrow(InvalidArgumentError);
    await expect(b.watch!('k', 'not a function' as never)).rejects.toThrow(InvalidArgumentError);
    expect(() => b.list!(7 as never)).toThrow(InvalidArgumentError);
    await expect(b.extend([{ key: 'k', token: 't', ttlMs: -1 }])).rejects.toThrow(InvalidArgumentError);
    await expect(b.release('k', '')).rejects.toThrow(InvalidArgumentError);
    expect(cs.every((c) => c.status === 'wait')).toBe(true);
    await b.close();
    await expect(b.acquire('k', { token: 't', ttlMs: 1000 })).rejects.toThrow(/closed/);
  });

  it('declares its capabilities and never closes the user’s clients', async () => {
    await requireShared(SHARED_PORTS.slice(0, 3));
    const cs = await clients('node-redis', SHARED_PORTS.slice(0, 3));
    made.push(...cs);
    const b = redlock(cs);
    expect(b.name).toBe('redlock');
    expect(b.capabilities).toEqual({ push: true, fair: true, value: true, results: true, session: false });
    const ac = new AbortController();
    const waiting = b.waitForChange!('cap', ac.signal, 10_000);
    await b.close(); // wakes the waiter and closes only the backend's own subscriber connections
    await waiting;
    expect(cs.every((c) => (c as { isOpen: boolean }).isOpen)).toBe(true);
  });
});
