/**
 * `leasehold demo` where better-sqlite3 is not installed (`npm i leasehold --omit=optional`): the
 * CLI from a copy of src/ whose node_modules has every package of this project's but that one.
 * Before, it started every worker, each printed the same error, an empty timeline was drawn (its
 * axis labelled "-Infinitys") and it exited 70.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { project } from '../support/project.js';

const p = project(['better-sqlite3']);
const tmp = mkdtempSync(join(tmpdir(), 'leasehold-demo-tmp-'));
afterAll(() => {
  p.remove();
  rmSync(tmp, { recursive: true, force: true });
});

test('demo without better-sqlite3: one line naming the package, exit 69, no worker, no timeline', async () => {
  const r = await p.run(['src/cli/index.ts', 'demo'], { TMPDIR: tmp });
  expect(r.code, r.stderr).toBe(69);
  expect(r.stderr.trim().split('\n')).toHaveLength(1);
  expect(r.stderr).toMatch(/needs the better-sqlite3 package/);
  expect(r.stdout).toBe('');
  expect(readdirSync(tmp).filter((f) => f.startsWith('leasehold-demo-'))).toEqual([]); // its temporary directory is gone too
}, 60_000);
