import { Pg } from '../postgres/support.js';
import { conformance } from './suite.js';

const env = new Pg();

conformance({
  name: 'postgres (pg Pool)',
  make: () => env.backend('pg'),
  breakLock: (fullKey, how) => env.breakLock(fullKey, how),
  countKeys: (prefix) => env.countKeys(prefix),
  cleanup: () => env.closeAll(),
});
