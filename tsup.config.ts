import { defineConfig } from 'tsup';

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    'backends/memory/index': 'src/backends/memory/index.ts',
    'backends/redis/index': 'src/backends/redis/index.ts',
    'backends/redlock/index': 'src/backends/redlock/index.ts',
    'backends/postgres/index': 'src/backends/postgres/index.ts',
  },
  format: ['esm', 'cjs'],
  dts: true,
  clean: true,
  sourcemap: true,
  target: 'node20',
  splitting: true,
  treeshake: true,
  external: ['ioredis', 'redis', 'pg', 'postgres'],
});
