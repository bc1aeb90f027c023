import { readdirSync } from 'node:fs';
import { defineConfig } from 'tsup';

// one entry per backend folder: `leasehold/<name>`
const backends = readdirSync('src/backends', { withFileTypes: true }).filter((d) => d.isDirectory());
const external = ['ioredis', 'redis', 'pg', 'postgres', 'better-sqlite3', 'node-zookeeper-client', 'etcd3'];

export default defineConfig([
  {
    entry: {
      index: 'src/index.ts',
      ...Object.fromEntries(backends.map((d) => [`backends/${d.name}/index`, `src/backends/${d.name}/index.ts`])),
    },
    format: ['esm', 'cjs'],
    dts: true,
    clean: ['!cli/**'], // dist/cli is the other build's (they run at the same time)
    sourcemap: true,
    target: 'node20',
    splitting: true,
    treeshake: true,
    external,
  },
  {
    // the `leasehold` executable: ESM only, no types, its own folder
    entry: { index: 'src/cli/index.ts' },
    outDir: 'dist/cli',
    format: ['esm'],
    dts: false,
    clean: true,
    sourcemap: true,
    target: 'node20',
    splitting: true,
    treeshake: true,
    external,
  },
]);
