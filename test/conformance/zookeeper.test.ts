import { Zk } from '../support/zookeeper.js';
import { conformance } from './suite.js';

const env = new Zk();

conformance({
  name: 'zookeeper',
  make: () => env.backend(),
  // an outsider deletes the holder's node; there is nothing to overwrite in place
  breakLock: (fullKey) => env.breakLock(fullKey),
  breakModes: ['delete'],
  countKeys: (prefix) => env.countKeys(prefix),
  cleanup: () => env.closeAll(),
});
