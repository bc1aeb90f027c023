/** The contended-wait chart (bench/report/svg.ts): every line can be told apart. */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { waitChart } from '../../bench/report/svg.js';
import type { Results } from '../../bench/report/types.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

test("run 16's 11 contended lines (and twice as many) each get a stroke of their own", () => {
  const runs = (JSON.parse(readFileSync(join(root, 'bench/results/2026-12-05-vm-run16.json'), 'utf8')) as Results)
    .contended!.runs;
  expect(runs.length).toBe(11);
  for (const list of [runs, [...runs, ...runs]]) {
    const svg = waitChart(list, 'test');
    const strokes = [...svg.matchAll(/<polyline fill="none" stroke="([^"]+)"(?: stroke-dasharray="([^"]+)")?/g)].map(
      (m) => `${m[1]} ${m[2] ?? ''}`,
    );
    expect(strokes.length).toBe(list.length);
    expect(new Set(strokes).size).toBe(list.length);
  }
});
