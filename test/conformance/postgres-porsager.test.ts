import { Pg } from '../postgres/support.js';
import { conformance } from './suite.js';

const env = new Pg();

conformance({
  name: 'postgres (postgres.js sql)',
  make: () => env.backend('postgres.js'),
  breakLock: (fullKey, how) => env.breakLock(fullKey, how),
  countKeys: (prefix) => env.countKeys(prefix),
  cleanup: () => env.closeAll(),
});
