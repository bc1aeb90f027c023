import { etcd } from '../../src/backends/etcd/index.js';
import { entriesOf, rangeEnd } from '../../src/backends/etcd/keys.js';
import { EtcdClients } from '../support/etcd.js';
import { conformance } from './suite.js';

const clients = new EtcdClients();
let admin: Awaited<ReturnType<EtcdClients['make']>> | null = null;
const outsider = async () => (admin ??= await clients.make());

conformance({
  name: 'etcd',
  make: async () => etcd(await clients.make()),
  breakLock: async (fullKey, how) => {
    const c = await outsider();
    // the holder's entry: the one with the lowest create revision
    const prefix = Buffer.from(entriesOf(fullKey));
    const r = await c.kv.range({
      key: prefix,
      range_end: rangeEnd(prefix),
      sort_target: 'Create',
      sort_order: 'Ascend',
      limit: 1,
    });
    const kv = r.kvs[0];
    if (!kv) throw new Error(`no entry under ${fullKey}`);
    if (how === 'delete') await c.kv.deleteRange({ key: kv.key });
    else await c.kv.put({ key: kv.key, value: Buffer.from('=someone-else') });
  },
  countKeys: async (prefix) => {
    const c = await outsider();
    return c.getAll().prefix(prefix.replace(/%/g, '%25').replace(/\//g, '%2F')).count();
  },
  cleanup: async () => clients.closeAll(),
});
