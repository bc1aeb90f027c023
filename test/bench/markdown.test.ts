/** The bench's Markdown report (bench/report/markdown.ts): which rows go in which section. */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { markdown } from '../../bench/report/markdown.js';
import type { Results } from '../../bench/report/types.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const run16 = () => JSON.parse(readFileSync(join(root, 'bench/results/2026-12-05-vm-run16.json'), 'utf8')) as Results;
const section = (md: string, n: number) => md.slice(md.indexOf(`## ${n}. `), md.indexOf(`## ${n + 1}. `));

test('a contended ZooKeeper or Postgres row is in its own section only, not in section 2', () => {
  const md = markdown(run16(), 'chart.svg');
  expect(section(md, 2)).toContain('| leasehold (redis) |');
  expect(section(md, 2)).not.toContain('leasehold (zookeeper)');
  expect(section(md, 2)).not.toContain('leasehold (postgres)');
  expect(section(md, 5)).toContain('| leasehold (postgres) |');
  expect(section(md, 6)).toContain('| leasehold (zookeeper) |');
});
