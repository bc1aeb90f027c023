/**
 * A copy of src/ in a temporary directory whose node_modules links every package of this
 * project's but the ones named: for tests of what a user sees with a package missing or broken.
 * `replace` may then put its own version of a left-out package in place.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const root = resolve(__dirname, '../..');

export interface Project {
  dir: string;
  /** Runs `node --import tsx <args>` in the project; never rejects on an exit code. */
  run(args: string[], env?: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }>;
  remove(): void;
}

export function project(omit: readonly string[], replace: (nodeModules: string) => void = () => {}): Project {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-project-'));
  cpSync(join(root, 'src'), join(dir, 'src'), { recursive: true });
  const nm = join(dir, 'node_modules');
  mkdirSync(nm);
  for (const name of readdirSync(join(root, 'node_modules'))) {
    if (omit.includes(name)) continue;
    symlinkSync(join(root, 'node_modules', name), join(nm, name));
  }
  replace(nm);
  writeFileSync(join(dir, 'package.json'), '{"type":"module","version":"0.0.0"}');
  return {
    dir,
    run: (args, env = {}) =>
      new Promise((ok) =>
        execFile(
          process.execPath,
          ['--import', 'tsx', ...args],
          { cwd: dir, timeout: 30_000, env: { ...process.env, NO_COLOR: '1', ...env } },
          (e, stdout, stderr) => ok({ code: e ? ((e as { code?: number }).code ?? null) : 0, stdout, stderr }),
        ),
      ),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
