/**
 * The leasehold the bench measures: the built package (dist/, what users install), the same way
 * the peer libraries run as their published JavaScript. `npm run bench` builds it first.
 * LEASEHOLD_BENCH_SOURCE=1 measures the TypeScript source under tsx instead (no build; tsx's
 * transform keeps function names and costs a little per closure). LEASEHOLD_BENCH_DIST=<dir>
 * measures another build (e.g. one of an older commit, copied inside the checkout so that its
 * imports resolve): bench/pg-contended.ts sets it per subject to compare builds side by side.
 *
 * Every runtime import of leasehold in bench/ goes through this module, so that the engine and
 * the backends come from the same build (an error class from one copy is not an instance of the
 * other's).
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

type Core = typeof import('../../src/index.js');
type RedisMod = typeof import('../../src/backends/redis/index.js');
type RedlockMod = typeof import('../../src/backends/redlock/index.js');
type PostgresMod = typeof import('../../src/backends/postgres/index.js');
type EtcdMod = typeof import('../../src/backends/etcd/index.js');
type SqliteMod = typeof import('../../src/backends/sqlite/index.js');
type ZookeeperMod = typeof import('../../src/backends/zookeeper/index.js');

export const FROM_SOURCE = process.env.LEASEHOLD_BENCH_SOURCE === '1';

/** Where a module of leasehold is loaded from: `index` or a backend's name. */
export function moduleHref(name: string): string {
  const rel = name === 'index' ? 'index' : `backends/${name}/index`;
  if (FROM_SOURCE) return new URL(`../../src/${rel}.ts`, import.meta.url).href;
  const dist = process.env.LEASEHOLD_BENCH_DIST;
  const url = dist ? pathToFileURL(`${resolve(dist)}/${rel}.js`) : new URL(`../../dist/${rel}.js`, import.meta.url);
  if (!existsSync(fileURLToPath(url)))
    throw new Error(
      `${fileURLToPath(url)} is missing: run \`npm run build\` (npm run bench does) or set LEASEHOLD_BENCH_SOURCE=1`,
    );
  return url.href;
}

const load = async <T>(name: string): Promise<T> => (await import(moduleHref(name))) as T;

export const core = await load<Core>('index');
export const { createLocks } = core;
export const { redis } = await load<RedisMod>('redis');
export const { etcd } = await load<EtcdMod>('etcd');
export const { sqlite } = await load<SqliteMod>('sqlite');
export const { connectZookeeper } = await load<ZookeeperMod>('zookeeper');
export const redlockModule = () => load<RedlockMod>('redlock');
export const postgresModule = () => load<PostgresMod>('postgres');
/** Where the build came from, for the report's header. */
export const SOURCE_LABEL = FROM_SOURCE ? 'TypeScript source under tsx' : 'the built package (dist/)';
