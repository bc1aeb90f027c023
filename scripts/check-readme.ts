/**
 * README snippets compile as written (`npm run check:readme`, a CI step): every ```ts block of
 * README.md (or of the Markdown files named on the command line) becomes its own module in a
 * temp project where `leasehold` is this package, built (dist/, through package.json `exports`),
 * beside the real client packages. Each block must import what it uses: the only names given to
 * it are the placeholders for the reader's own code in APP (runReport, ship, …), none of which
 * is a name of leasehold, Node or a client. A failing block is reported at its README line.
 *   npx tsx scripts/check-readme.ts [file.md…]
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ensureBuilt } from './built.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The reader's own code that snippets call: declared, never imported. */
export const APP = `
declare global {
  /** your report job */
  function runReport(options: { signal: AbortSignal; fence: bigint }): Promise<void>;
  /** your order shipping */
  function ship(orderId: string, options: { fence: bigint }): Promise<void>;
  /** your nightly job */
  function sendDigest(): Promise<void>;
  /** your payment call */
  function charge(card: string, amountCents: number): Promise<{ receipt: string }>;
  /** your scheduler loop */
  function runScheduler(options: { signal: AbortSignal; fence: bigint }): Promise<void>;
  /** your routing of requests to the leader */
  function route(leader: { value: string; fence: bigint } | null): void;
  /** one unit of your queue work */
  function processOneMessage(signal: AbortSignal): Promise<void>;
}
export {};
`;

export interface Block {
  /** 1-based line of the first code line (after the opening fence). */
  line: number;
  code: string;
}

/** The fenced blocks whose info string starts with ts, typescript or tsx. */
export function extractTsBlocks(markdown: string): Block[] {
  const lines = markdown.split('\n');
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^ {0,3}(`{3,}|~{3,})\s*([\w-]*)/.exec(lines[i]!);
    if (!open) continue;
    const fence = open[1]!;
    const lang = open[2]!.toLowerCase();
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      const close = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(lines[j]!);
      if (close && close[1]![0] === fence[0] && close[1]!.length >= fence.length) break;
      body.push(lines[j]!);
    }
    if (['ts', 'typescript', 'tsx'].includes(lang)) out.push({ line: i + 2, code: body.join('\n') });
    i = j;
  }
  return out;
}

export interface Problem {
  file: string;
  line: number;
  message: string;
}

/** Type-checks every ts block of `files`; returns the problems at their Markdown lines. */
export function checkMarkdown(files: readonly string[], options: { build?: boolean } = {}): Problem[] {
  if (options.build !== false) ensureBuilt(root);
  const tmp = mkdtempSync(join(tmpdir(), 'leasehold-readme-'));
  try {
    mkdirSync(join(tmp, 'node_modules', '@types'), { recursive: true });
    symlinkSync(root, join(tmp, 'node_modules', 'leasehold'), 'dir');
    for (const dep of ['ioredis', 'redis', 'pg', 'postgres', 'etcd3', '@types/node', '@types/pg']) {
      symlinkSync(join(root, 'node_modules', dep), join(tmp, 'node_modules', dep), 'dir');
    }
    writeFileSync(join(tmp, 'package.json'), JSON.stringify({ name: 'readme-check', private: true, type: 'module' }));
    writeFileSync(join(tmp, 'app.d.ts'), APP);
    const where = new Map<string, { file: string; line: number }>();
    for (const file of files) {
      for (const b of extractTsBlocks(readFileSync(file, 'utf8'))) {
        const name = `${basename(file).replace(/\W/g, '_')}_${b.line}.ts`;
        where.set(name, { file, line: b.line });
        writeFileSync(join(tmp, name), `${b.code}\nexport {};\n`); // a module: its own scope, top-level await
      }
    }
    if (where.size === 0) return [];
    const tsconfig = {
      compilerOptions: {
        strict: true,
        noEmit: true,
        target: 'es2022',
        lib: ['es2022', 'esnext.disposable'],
        module: 'nodenext',
        moduleResolution: 'nodenext',
        types: ['node'],
        skipLibCheck: true, // our own declarations are checked without it by scripts/check-pack.ts
      },
      files: ['app.d.ts', ...where.keys()],
    };
    writeFileSync(join(tmp, 'tsconfig.json'), JSON.stringify(tsconfig, null, 2));
    try {
      execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', tmp], {
        cwd: tmp,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      return [];
    } catch (e) {
      const text = `${(e as { stdout?: string }).stdout ?? ''}${(e as { stderr?: string }).stderr ?? ''}`;
      const problems: Problem[] = [];
      for (const m of text.matchAll(/^(\S+?\.ts)\((\d+),(\d+)\): (error .*)$/gm)) {
        const at = where.get(m[1]!);
        if (at) problems.push({ file: at.file, line: at.line + Number(m[2]) - 1, message: m[4]! });
        else problems.push({ file: m[1]!, line: Number(m[2]), message: m[4]! });
      }
      if (problems.length === 0) problems.push({ file: files.join(', '), line: 0, message: text.trim() });
      return problems;
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const files = process.argv.slice(2).filter((a) => !a.startsWith('--'));
  const targets = files.length ? files.map((f) => resolve(f)) : [join(root, 'README.md')];
  const count = targets.reduce((n, f) => n + extractTsBlocks(readFileSync(f, 'utf8')).length, 0);
  const problems = checkMarkdown(targets, { build: !process.argv.includes('--no-build') });
  for (const p of problems) console.log(`${p.file.replace(`${root}/`, '')}:${p.line}: ${p.message}`);
  console.log(
    problems.length
      ? `readme check: ${problems.length} problem(s) in ${count} TypeScript blocks`
      : `readme check: ${count} TypeScript blocks compile against the built package`,
  );
  process.exit(problems.length ? 1 : 0);
}
