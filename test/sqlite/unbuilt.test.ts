/**
 * better-sqlite3 installed without running its install script (npm with `--ignore-scripts`, or
 * npm 12 without `allowScripts`): the package resolves but its native part was never built. The
 * library and the CLI's default backend say so in one line, not "cannot open <the database>"
 * followed by every path the `bindings` package tried.
 */
import { cpSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { project, type Project } from '../support/project.js';

const real = resolve(__dirname, '../../node_modules/better-sqlite3');
let p: Project;
beforeAll(() => {
  // a copy of better-sqlite3 without build/ (nor the sources it would be built from)
  p = project(['better-sqlite3'], (nm) =>
    cpSync(real, join(nm, 'better-sqlite3'), {
      recursive: true,
      filter: (src) => !['build', 'deps', 'src'].includes(src.slice(real.length + 1).split('/')[0]!),
    }),
  );
});
afterAll(() => p?.remove());

test('sqlite() and fromUrl("sqlite:…") with an unbuilt better-sqlite3: LEASEHOLD_MISSING_PEER with the fix', async () => {
  writeFileSync(
    join(p.dir, 'child.ts'),
    `
    import { fromUrl } from './src/index.ts';
    import { sqlite } from './src/backends/sqlite/index.ts';
    const out = [];
    for (const open of [() => sqlite('${p.dir}/a.db'), () => fromUrl('sqlite:${p.dir}/b.db')]) {
      try { await open(); out.push({ ok: true }); } catch (e) { out.push({ name: e.name, code: e.code, message: e.message }); }
    }
    console.log(JSON.stringify(out));
    `,
  );
  const r = await p.run(['child.ts']);
  expect(r.stderr).toBe('');
  const out = JSON.parse(r.stdout);
  expect(out).toHaveLength(2);
  for (const e of out) {
    expect(e).toMatchObject({ name: 'LeaseholdError', code: 'LEASEHOLD_MISSING_PEER' });
    expect(e.message).toMatch(/better-sqlite3 is installed but not built/);
    expect(e.message).toMatch(/npm rebuild better-sqlite3/);
    expect(e.message).toMatch(/"allowScripts": \{ "better-sqlite3": true \}/);
    expect(e.message).not.toMatch(/cannot open|Tried:/);
  }
}, 60_000);

test('the CLI on its default backend with an unbuilt better-sqlite3: one line of advice, exit 69', async () => {
  const r = await p.run(['src/cli/index.ts', 'run', 'unbuilt', '--', 'echo', 'hi'], {
    LEASEHOLD_URL: `sqlite:${p.dir}/cli.db`,
  });
  expect(r).toMatchObject({ code: 69, stdout: '' });
  expect(r.stderr.trim().split('\n')).toHaveLength(1);
  expect(r.stderr).toMatch(/better-sqlite3 is installed but not built.*npm rebuild better-sqlite3/);
}, 60_000);
