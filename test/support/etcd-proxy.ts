/**
 * Locks whose etcd client talks to the real etcd through a TCP proxy (test/faults/proxy.ts), for
 * tests that lose replies or cut connections. Each is opened with its etcd lease already granted
 * (a warm-up acquire and release), so the call under test is the only one in flight.
 */
import { expect } from 'vitest';
import { createLocks, type Locks, type LocksOptions } from '../../src/index.js';
import { etcd, type EtcdOptions } from '../../src/backends/etcd/index.js';
import { Proxy } from '../faults/proxy.js';
import { ETCD_HOSTS, type EtcdClients } from './etcd.js';

export class EtcdBehindProxy {
  private readonly open: Locks[] = [];
  private readonly proxies: Proxy[] = [];
  private n = 0;

  constructor(
    private readonly clients: EtcdClients,
    private readonly prefix: string,
    private readonly port = Number(ETCD_HOSTS[0]!.split(':')[1] ?? 2379),
  ) {}

  /** A fresh key name. */
  key(): string {
    return `k${++this.n}`;
  }

  /** Locks (closed by `closeAll`) on a client through a new proxy. */
  async make(backend: EtcdOptions = {}, locks: LocksOptions = {}): Promise<{ proxy: Proxy; locks: Locks }> {
    const proxy = new Proxy(this.port);
    this.proxies.push(proxy);
    await proxy.listen();
    const l = this.track(
      createLocks(etcd(await this.clients.make([`127.0.0.1:${proxy.port}`]), backend), {
        prefix: this.prefix,
        ...locks,
      }),
    );
    expect(await (await l.acquire(`warm-${this.key()}`)).release()).toBe(true);
    return { proxy, locks: l };
  }

  /** `locks`, closed by `closeAll` too. */
  track(locks: Locks): Locks {
    this.open.push(locks);
    return locks;
  }

  /** Closes every Locks, then every proxy (afterEach). */
  async closeAll(): Promise<void> {
    await Promise.allSettled(this.open.splice(0).map((l) => l.close()));
    await Promise.allSettled(this.proxies.splice(0).map((p) => p.close()));
  }
}
