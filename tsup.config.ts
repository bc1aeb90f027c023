import { readdirSync } from 'node:fs';
import { defineConfig } from 'tsup';

// one entry per backend folder: `leasehold/<name>`
const backends = readdirSync('src/backends', { withFileTypes: true }).filter((d) => d.isDirectory());

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    ...Object.fromEntries(backends.map((d) => [`backends/${d.name}/index`, `src/backends/${d.name}/index.ts`])),
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
