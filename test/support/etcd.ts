/** Real etcd clients for tests. A missing server fails the test run; it is never skipped. */
import { Etcd3 } from 'etcd3';

/** The single member of scripts/services.d/etcd.sh. */
export const ETCD_HOSTS = (process.env.LEASEHOLD_ETCD_HOSTS ?? '127.0.0.1:2379').split(',');
/** The 3-member cluster (failover tests). */
export const ETCD_CLUSTER = (
  process.env.LEASEHOLD_ETCD_CLUSTER ?? '127.0.0.1:2479,127.0.0.1:2481,127.0.0.1:2483'
).split(',');

/** Opens clients and remembers them so one call closes them all. */
export class EtcdClients {
  private readonly open: Etcd3[] = [];

  async make(hosts: readonly string[] = ETCD_HOSTS): Promise<Etcd3> {
    const c = new Etcd3({ hosts: hosts.map((h) => `http://${h}`), dialTimeout: 2000 });
    this.open.push(c);
    try {
      await c.maintenance.status();
    } catch (e) {
      throw new Error(
        `etcd at ${hosts.join(',')} is not reachable (run scripts/services.sh): ${(e as Error).message}`,
        {
          cause: e,
        },
      );
    }
    return c;
  }

  closeAll(): void {
    for (const c of this.open.splice(0)) c.close();
  }
}
