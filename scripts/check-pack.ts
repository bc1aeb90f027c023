/**
 * The package as a user gets it (`npm run check:package`, a CI step):
 *   1. copies the repository's files (no dist/) to a temp dir and runs `npm pack` there, so the
 *      tarball is what a fresh clone packs (prepack builds dist/);
 *   2. checks the tarball holds every file package.json points at, and that the declarations
 *      every user loads (the root and shared chunks) import no client package;
 *   3. runs publint (strict) and attw (every resolution, node10 included) on the tarball;
 *   4. installs the tarball into temp projects (prefer-offline; client packages are linked from this
 *      repo's node_modules) and, for EVERY subpath of package.json's `exports` (backends added
 *      later are covered without touching this file), type-checks an import under nodenext,
 *      node16 (ESM and CommonJS), bundler, node10 and a CommonJS project with default compiler
 *      options (no esModuleInterop, no skipLibCheck), then imports it with Node (ESM and require);
 *   5. type-checks projects that have only one client installed, with the right client accepted
 *      and a wrong argument refused.
 * Usage: npx tsx scripts/check-pack.ts [--keep]   (--keep leaves the temp dir for inspection)
 */
import { execFile, execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const keep = process.argv.includes('--keep');
const tmp = mkdtempSync(join(tmpdir(), 'leasehold-pack-'));
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
let failures = 0;

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): string {
  try {
    return execFileSync(cmd, args, {
      cwd,
      encoding: 'utf8',
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      maxBuffer: 64 << 20,
    });
  } catch (e) {
    const x = e as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')} (in ${cwd}) failed:\n${x.stdout ?? ''}${x.stderr ?? ''}`.trim(), {
      cause: e,
    });
  }
}

/** Like `run`, without blocking: the type-checks run two at a time (the machine has 2 cores). */
function runAsync(cmd: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(cmd, args, { cwd, encoding: 'utf8', maxBuffer: 64 << 20 }, (e, stdout, stderr) =>
      e
        ? reject(new Error(`${cmd} ${args.join(' ')} (in ${cwd}) failed:\n${stdout}${stderr}`.trim(), { cause: e }))
        : resolve(stdout),
    ),
  );
}

/** Runs named async checks `width` at a time and reports them in order. */
async function checkAll(tasks: [string, () => Promise<void>][], width = 2): Promise<void> {
  const results: (string | null)[] = [];
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < tasks.length; i = next++) {
      const [name, fn] = tasks[i]!;
      const t0 = Date.now();
      try {
        await fn();
        results[i] = `ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)}s)`;
      } catch (e) {
        failures++;
        results[i] = `FAIL ${name}\n${String((e as Error).message ?? e).replace(/^/gm, '     ')}`;
      }
    }
  };
  await Promise.all(Array.from({ length: width }, worker));
  for (const r of results) console.log(r);
}

function check(name: string, fn: () => void): void {
  const t0 = Date.now();
  try {
    fn();
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)}s)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}\n${String((e as Error).message ?? e).replace(/^/gm, '     ')}`);
  }
}

// ---- 1. a fresh copy, packed
const fresh = join(tmp, 'repo');
const files = run('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], root)
  .split('\0')
  .filter((f) => f && existsSync(join(root, f)));
for (const f of files) cpSync(join(root, f), join(fresh, f), { recursive: true });
symlinkSync(join(root, 'node_modules'), join(fresh, 'node_modules'), 'dir');
if (existsSync(join(fresh, 'dist'))) throw new Error('the fresh copy must not have dist/');

let tarball = '';
check('npm pack from a fresh copy builds dist/ (prepack)', () => {
  const out = run('npm', ['pack', '--json', '--pack-destination', tmp], fresh);
  const json = JSON.parse(out.slice(out.lastIndexOf('\n[') + 1));
  tarball = join(tmp, json[0].filename);
  const entries = new Set<string>(json[0].files.map((f: { path: string }) => f.path));
  const wanted = new Set<string>(['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE']);
  const targets = (v: unknown): string[] =>
    typeof v === 'string' ? [v] : v && typeof v === 'object' ? Object.values(v).flatMap(targets) : [];
  for (const t of targets(pkg.exports)) wanted.add(t.replace(/^\.\//, ''));
  for (const f of ['main', 'module', 'types']) if (pkg[f]) wanted.add(pkg[f].replace(/^\.\//, ''));
  const missing = [...wanted].filter((f) => !entries.has(f));
  if (missing.length) throw new Error(`the tarball lacks: ${missing.join(', ')}`);
  const stray = [...entries].filter((f) => /^(src|test|bench|scripts|examples)\//.test(f));
  if (stray.length) throw new Error(`the tarball holds files users do not need: ${stray.slice(0, 5).join(', ')}`);
  console.log(`     ${json[0].filename}: ${entries.size} files, ${(json[0].size / 1024).toFixed(1)} kB`);
});
if (!tarball) finish();

const peers = Object.keys((pkg.peerDependencies ?? {}) as Record<string, string>);
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
check('the root and shared declarations import no client package (every user loads them)', () => {
  run('tar', ['-xzf', tarball, '-C', tmp], tmp);
  // top level: dist/index.d.ts and the chunks several entries share. A backend's own
  // dist/backends/<name>/ may name its client: its users have it installed.
  const dts = run('find', [join(tmp, 'package', 'dist'), '-maxdepth', '1', '-name', '*.d.*ts'], tmp)
    .trim()
    .split('\n');
  const peer = new RegExp(`from ['"](${peers.map(escape).join('|')})['"]`);
  for (const f of dts) {
    const m = peer.exec(readFileSync(f, 'utf8'));
    if (m) throw new Error(`${f.slice(tmp.length + 1)} imports '${m[1]}'`);
  }
});

// ---- 3. linters of the package shape
check('publint --strict', () => {
  run(join(root, 'node_modules', '.bin', 'publint'), ['run', tarball, '--strict'], tmp);
});
check('attw (node10, node16 CJS/ESM, bundler)', () => {
  run(join(root, 'node_modules', '.bin', 'attw'), [tarball, '--format', 'ascii'], tmp);
});

// ---- 4. every subpath, every resolution mode
const subpaths = Object.keys(pkg.exports as Record<string, unknown>)
  .filter((k) => k !== './package.json')
  .map((k) => (k === '.' ? 'leasehold' : `leasehold/${k.slice(2)}`));
const ident = (spec: string) => spec.replace(/[^a-z0-9]+/gi, '_');
/** Usage per known subpath (compiled only where the subpath exists). */
const usage: Record<string, string> = {
  leasehold:
    'export const l = createLocks(m_leasehold_memory.memory(), { ttl: "30s" }); void m_leasehold.toMs("1m30s", "x");',
  'leasehold/redis': 'export const r = (c: import("ioredis").Redis) => m_leasehold_redis.redis(c);',
  'leasehold/redlock': 'export const q = (c: import("ioredis").Redis[]) => m_leasehold_redlock.redlock(c);',
  'leasehold/postgres': 'export const p = (c: import("pg").Pool) => m_leasehold_postgres.postgres(c);',
  'leasehold/zookeeper':
    'export const z = (c: m_leasehold_zookeeper.ZookeeperClientLike) => m_leasehold_zookeeper.zookeeper(c);',
  'leasehold/etcd': 'export const e = (c: import("etcd3").Etcd3) => m_leasehold_etcd.etcd(c, { leaseTtl: "10s" });',
};

/** Every peer client (and its @types, where this repo has them): each subpath finds its client. */
const CLIENTS = ['@types/node', ...peers, ...peers.map((p) => `@types/${p}`)].filter((c) =>
  existsSync(join(root, 'node_modules', c)),
);

/** A consumer project with the tarball installed and `clients` linked from this repo. */
function project(name: string, type: 'module' | 'commonjs', clients: readonly string[]): string {
  const dir = join(tmp, name);
  mkdirSync(join(dir, 'node_modules', '@types'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, private: true, type }, null, 2));
  // prefer-offline: the tarball and its one dependency (commander) come from the npm cache when
  // it holds them; a clean machine whose cache has only tarballs (npm ci) asks the registry once
  run(
    'npm',
    ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', '--no-package-lock', tarball],
    dir,
  );
  for (const c of clients) {
    const from = join(root, 'node_modules', c);
    const to = join(dir, 'node_modules', c);
    if (!existsSync(to)) symlinkSync(from, to, 'dir');
  }
  return dir;
}

const all = project('consumer', 'module', CLIENTS);
const allCjs = project('consumer-cjs', 'commonjs', CLIENTS);

async function typecheck(
  dir: string,
  sub: string,
  compilerOptions: Record<string, unknown>,
  file: string,
  src: string,
): Promise<void> {
  const at = join(dir, sub);
  mkdirSync(at, { recursive: true });
  writeFileSync(join(at, file), src);
  writeFileSync(join(at, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: [file] }, null, 2));
  await runAsync(process.execPath, [tsc, '-p', join(at, 'tsconfig.json')], at);
}

const imports = (style: 'esm' | 'cjs') =>
  subpaths
    .map((s) =>
      style === 'esm' ? `import * as m_${ident(s)} from '${s}';` : `import m_${ident(s)} = require('${s}');`,
    )
    .join('\n');
const uses = (names: string) =>
  [
    `const { createLocks } = m_leasehold;`,
    ...subpaths.filter((s) => usage[s]).map((s) => usage[s]!),
    `export const all = [${subpaths.map((s) => `m_${ident(s)}`).join(', ')}];`,
    names,
  ].join('\n');

const strict = { strict: true, noEmit: true, skipLibCheck: false, types: ['node'] };
const modes: [string, string, Record<string, unknown>, string, 'esm' | 'cjs'][] = [
  [all, 'nodenext', { ...strict, module: 'nodenext', moduleResolution: 'nodenext' }, 'index.ts', 'esm'],
  [all, 'node16-esm', { ...strict, module: 'node16', moduleResolution: 'node16' }, 'index.ts', 'esm'],
  [allCjs, 'node16-cjs', { ...strict, module: 'node16', moduleResolution: 'node16' }, 'index.ts', 'cjs'],
  [allCjs, 'nodenext-cjs', { ...strict, module: 'nodenext', moduleResolution: 'nodenext' }, 'index.cts', 'cjs'],
  [all, 'bundler', { ...strict, module: 'esnext', moduleResolution: 'bundler', target: 'es2022' }, 'index.ts', 'esm'],
  [all, 'node10-esm', { ...strict, module: 'esnext', moduleResolution: 'node', target: 'es2022' }, 'index.ts', 'esm'],
  [allCjs, 'node10-cjs', { ...strict, module: 'commonjs', moduleResolution: 'node' }, 'index.ts', 'cjs'],
  // a plain CommonJS project: no options at all but the file list (no esModuleInterop, no skipLibCheck)
  [allCjs, 'cjs-defaults', {}, 'index.ts', 'esm'],
];
await checkAll(
  modes.map(([dir, sub, opts, file, style]) => [
    `types of ${subpaths.length} subpaths under ${sub}`,
    () => typecheck(dir, sub, opts, file, `${imports(style)}\n${uses('')}\n`),
  ]),
);

check(`node imports every subpath (ESM) and requires it (CommonJS), with the same names`, () => {
  const list = JSON.stringify(subpaths);
  const esm = `const out = {}; for (const s of ${list}) out[s] = Object.keys(await import(s)).sort(); console.log(JSON.stringify(out));`;
  const cjs = `const out = {}; for (const s of ${list}) out[s] = Object.keys(require(s)).filter((k) => k !== '__esModule').sort(); console.log(JSON.stringify(out));`;
  const a = run(process.execPath, ['--input-type=module', '-e', esm], all);
  const b = run(process.execPath, ['-e', cjs], allCjs);
  if (a !== b) throw new Error(`ESM and CommonJS export different names:\n${a}\n${b}`);
  const names = JSON.parse(a) as Record<string, string[]>;
  for (const s of subpaths) if (!names[s]?.length) throw new Error(`${s} exports nothing`);
  const smoke = `
    const { createLocks } = require('leasehold'); const { memory } = require('leasehold/memory');
    const locks = createLocks(memory());
    locks.withLock('k', (l) => typeof l.fence).then((t) => locks.close().then(() => console.log(t)));`;
  const t = run(process.execPath, ['-e', smoke], allCjs).trim();
  if (t !== 'bigint') throw new Error(`a lock from require('leasehold') did not work: ${t}`);
});

// ---- 5. one client installed
const onlyOne: [string, string[], string][] = [
  [
    'only-ioredis',
    ['ioredis', '@types/node'],
    `import { Redis } from 'ioredis';
     export const b = [redis(new Redis({ lazyConnect: true })), redlock([new Redis(7001), new Redis(7002), new Redis(7003)])];
     // @ts-expect-error a URL is not a client
     redis('redis://127.0.0.1:6379');`,
  ],
  [
    'only-node-redis',
    ['redis', '@types/node'],
    `import { createClient } from 'redis';
     export const b = redis(createClient());
     // @ts-expect-error an options object is not a client
     redis({ url: 'redis://127.0.0.1:6379' });`,
  ],
  [
    'only-pg',
    ['pg', '@types/pg', '@types/node'],
    `import pg from 'pg';
     export const b = postgres(new pg.Pool());
     // @ts-expect-error a single Client is not a Pool
     postgres(new pg.Client());`,
  ],
  [
    'only-postgres-js',
    ['postgres', '@types/node'],
    `import postgresJs from 'postgres';
     export const b = postgres(postgresJs());
     // @ts-expect-error a connection string is not a client
     postgres('postgres://localhost/test');`,
  ],
];
await checkAll(
  onlyOne.map(([name, clients, body]) => [
    `types with one client installed: ${name}`,
    async () => {
      const dir = project(name, 'module', clients);
      const src = `import { createLocks } from 'leasehold';
      import { redis } from 'leasehold/redis';
      import { redlock } from 'leasehold/redlock';
      import { postgres } from 'leasehold/postgres';
      ${body}
      void createLocks; void redis; void redlock; void postgres;\n`;
      await typecheck(dir, 'check', { ...strict, module: 'nodenext', moduleResolution: 'nodenext' }, 'index.ts', src);
    },
  ]),
);

finish();

function finish(): never {
  if (keep) console.log(`kept ${tmp}`);
  else rmSync(tmp, { recursive: true, force: true });
  console.log(failures ? `package check: ${failures} failed` : 'package check: all passed');
  process.exit(failures ? 1 : 0);
}
