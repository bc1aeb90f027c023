import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Backends are shared servers: files run one at a time so timing assertions stay honest on 2 cores.
    fileParallelism: false,
  },
});
