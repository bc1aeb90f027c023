import { memory, MemoryStore } from '../../src/backends/memory/index.js';
import { conformance } from './suite.js';

const store = new MemoryStore();

conformance({
  name: 'memory',
  make: async () => memory({ store }),
  breakLock: async (fullKey, how) => {
    if (how === 'delete') store.locks.delete(fullKey);
    else
      store.locks.set(fullKey, {
        token: 'someone-else',
        expiresAt: performance.now() + 60_000,
        value: undefined,
        fence: ++store.lastFence,
      });
  },
  countKeys: async (prefix) =>
    [...store.locks.keys(), ...store.queues.keys(), ...store.generations.keys(), ...store.results.keys()].filter((k) =>
      k.startsWith(prefix),
    ).length,
});
