/**
 * Builds dist/ when it is missing or older than what it is made from, for the tests and checks
 * that use the package the way users do (examples, README snippets). CI builds first anyway.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

function newest(path: string): number {
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  return Math.max(st.mtimeMs, ...readdirSync(path).map((f) => newest(join(path, f))));
}

export function ensureBuilt(root: string): void {
  const outputs = ['dist/index.js', 'dist/index.cjs', 'dist/index.d.ts', 'dist/cli/index.js'].map((f) => join(root, f));
  const inputs = ['src', 'package.json', 'tsup.config.ts'].map((f) => join(root, f));
  if (outputs.every(existsSync)) {
    const built = Math.min(...outputs.map((f) => statSync(f).mtimeMs));
    if (built >= Math.max(...inputs.map(newest))) return;
  }
  try {
    execFileSync(process.execPath, [join(root, 'node_modules', 'tsup', 'dist', 'cli-default.js')], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      encoding: 'utf8',
    });
  } catch (e) {
    const x = e as { stdout?: string; stderr?: string };
    throw new Error(`npm run build failed:\n${x.stdout ?? ''}${x.stderr ?? ''}`, { cause: e });
  }
}
