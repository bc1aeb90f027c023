import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { conformance } from './suite.js';

const store = new MemoryStore();

conformance({
  name: 'memory',
  make: async () => memory({ store }),
  breakLock: async (fullKey, how) => {
    if (how === 'delete') store.locks.delete(fullKey);
    else store.locks.set(fullKey, { token: 'someone-else', expiresAt: performance.now() + 60_000, value: undefined });
  },
  countKeys: async (prefix) =>
    [...store.locks.keys(), ...store.fences.keys()].filter((k) => k.startsWith(prefix)).length,
});
