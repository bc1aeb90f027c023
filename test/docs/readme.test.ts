/**
 * The README stays true: its TypeScript blocks are found and type-checked against the built
 * package (the check itself is `npm run check:readme`, a CI step; here we prove it catches a
 * broken snippet), and every error code, channel and example the code has is documented.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { checkMarkdown, extractTsBlocks } from '../../scripts/check-readme.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? sources(join(dir, d.name)) : d.name.endsWith('.ts') ? [join(dir, d.name)] : [],
  );
}

describe('extractTsBlocks', () => {
  test('finds ts, typescript and tsx blocks, with ``` or ~~~ fences, and nothing else', () => {
    const md = [
      '# t', //                           1
      '```ts', //                         2
      'const a = 1;', //                  3
      '```', //                           4
      '```sh', //                         5
      'echo "```ts"', //                  6
      '```', //                           7
      '~~~typescript', //                 8
      'const b = 2;', //                  9
      '```', //                           10 (not a closing fence for ~~~)
      '~~~', //                           11
      '````ts title="x"', //              12
      '```', //                           13 (shorter: content)
      '````', //                          14
      '```js', //                         15
      'const c = 3;', //                  16
      '```', //                           17
    ].join('\n');
    expect(extractTsBlocks(md)).toEqual([
      { line: 3, code: 'const a = 1;' },
      { line: 9, code: 'const b = 2;\n```' },
      { line: 13, code: '```' },
    ]);
  });

  test('the README has TypeScript blocks in every section that shows code', () => {
    expect(extractTsBlocks(readme).length).toBeGreaterThanOrEqual(10);
  });
});

test('checkMarkdown reports a snippet that does not import what it uses, at its README line', () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-readme-test-'));
  try {
    const md = join(dir, 'SAMPLE.md');
    writeFileSync(
      md,
      [
        'Good:',
        '```ts',
        "import { createLocks } from 'leasehold';",
        "import { memory } from 'leasehold/memory';",
        "await createLocks(memory(), { ttl: '1m30s' }).withLock('k', (lease) => runReport({ signal: lease.signal, fence: lease.fence }));",
        '```',
        'Bad (no import of createLocks, a wrong client type):',
        '```ts',
        "import { redis } from 'leasehold/redis';",
        'const locks = createLocks(redis("redis://127.0.0.1:6379"));',
        '```',
      ].join('\n'),
    );
    const problems = checkMarkdown([md]);
    expect(problems.map((p) => [p.line, p.message.slice(0, 14)])).toEqual([
      [10, 'error TS2304: '], // Cannot find name 'createLocks'
      [10, 'error TS2345: '], // a string is not a Redis client
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);

test('every error code the source can throw or announce is in the README', () => {
  const codes = new Set<string>();
  for (const f of sources(join(root, 'src'))) {
    for (const m of readFileSync(f, 'utf8').matchAll(/'(LEASEHOLD_[A-Z_]+)'/g)) codes.add(m[1]!);
  }
  expect(codes.size).toBeGreaterThanOrEqual(12);
  const missing = [...codes].filter((c) => !readme.includes(`\`${c}\``));
  expect(missing, 'document these codes in the README (Errors)').toEqual([]);
});

test('every diagnostics channel is in the README', () => {
  const events = readFileSync(join(root, 'src', 'events.ts'), 'utf8');
  const names = [...events.matchAll(/channel\('leasehold:(\w+)'\)/g)].map((m) => m[1]!);
  expect(names).toContain('warning');
  const missing = names.filter((n) => !readme.includes(`leasehold:${n}`) && !readme.includes(`\`:${n}\``));
  expect(missing).toEqual([]);
});

test('every runnable example is linked from the README', () => {
  const examples = readdirSync(join(root, 'examples')).filter((f) => f.endsWith('.ts') && f !== 'tour.ts');
  expect(examples.length).toBeGreaterThanOrEqual(11);
  const missing = examples.filter((f) => !readme.includes(`examples/${f}`));
  expect(missing).toEqual([]);
});
