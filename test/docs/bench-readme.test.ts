/**
 * The README's benchmark goals table stays true to the committed results: the run it cites is the
 * latest full run in bench/results/, each goal's verdict for that run is the one stored in the
 * run's JSON, and the "met in runs …" / "missed in runs …" history names exactly the numbered
 * runs whose stored verdict says so.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const resultsDir = join(root, 'bench/results');

interface StoredGoal {
  id: string;
  met: boolean | null;
}
const goalsOf = (file: string): StoredGoal[] =>
  (JSON.parse(readFileSync(join(resultsDir, file), 'utf8')) as { goals: StoredGoal[] }).goals;

/** Numbered full runs: `<date>-<host>-runN.json`, plus run 2, which the README links by its file. */
function numberedRuns(): Map<number, string> {
  const runs = new Map<number, string>();
  for (const f of readdirSync(resultsDir)) {
    const m = /-run(\d+)\.json$/.exec(f);
    if (m) runs.set(Number(m[1]), f);
  }
  const two = /\[run 2\]\(bench\/results\/([^)]+)\.md\)/.exec(readme);
  if (two) runs.set(2, `${two[1]}.json`);
  return runs;
}

/** "1, 3, 4 and 6–16" → [1, 3, 4, 6, …, 16] */
function runList(text: string): number[] {
  return text
    .split(/,|\band\b/)
    .map((p) => p.trim())
    .filter(Boolean)
    .flatMap((p) => {
      const range = /^(\d+)\s*[–-]\s*(\d+)$/.exec(p);
      if (range) {
        const out: number[] = [];
        for (let i = Number(range[1]); i <= Number(range[2]); i++) out.push(i);
        return out;
      }
      if (!/^\d+$/.test(p)) throw new Error(`not a run number: "${p}"`);
      return [Number(p)];
    });
}

function goalsTable(): { run: number; rows: Map<string, { verdict: string; history: string }> } {
  const lines = readme.split('\n');
  const head = lines.findIndex((l) => /^\| goal \| target \| run \d+ \| run \d+ verdict \| runs 1–\d+ \|$/.test(l));
  if (head < 0) throw new Error('README: no goals table with a "run N verdict" and a "runs 1–N" column');
  const run = Number(/\| run (\d+) \|/.exec(lines[head]!)![1]);
  const rows = new Map<string, { verdict: string; history: string }>();
  for (const l of lines.slice(head + 2)) {
    if (!l.startsWith('|')) break;
    const cells = l.split(' | ').map((c) => c.replace(/^\| |\s*\|$/g, '').trim());
    const id = /^(P\d)\b/.exec(cells[0]!)?.[1];
    if (id) rows.set(id, { verdict: cells[3]!, history: cells[4]! });
  }
  return { run, rows };
}

describe('README benchmark goals table', () => {
  const runs = numberedRuns();
  const { run, rows } = goalsTable();

  test('cites the latest numbered run, and that run is the data the text links', () => {
    expect(run).toBe(Math.max(...runs.keys()));
    expect(readme).toContain(`[data](bench/results/${runs.get(run)})`);
  });

  test("each goal's verdict is the one stored in that run's JSON", () => {
    const stored = goalsOf(runs.get(run)!);
    expect([...rows.keys()].sort()).toEqual(stored.map((g) => g.id).sort());
    for (const g of stored) {
      const verdict = rows.get(g.id)!.verdict;
      const word = /^(met|missed|not measured)\b/.exec(verdict)?.[1];
      expect(word, `${g.id}: "${verdict}"`).toBe(g.met === null ? 'not measured' : g.met ? 'met' : 'missed');
    }
  });

  test('the history names exactly the runs in which each goal was met or missed', () => {
    for (const [id, { history }] of rows) {
      const met: number[] = [];
      const missed: number[] = [];
      for (const n of runs.keys()) {
        const g = goalsOf(runs.get(n)!).find((x) => x.id === id);
        if (g?.met === true) met.push(n);
        if (g?.met === false) missed.push(n);
      }
      const said = { met: [] as number[], missed: [] as number[] };
      for (const m of history.matchAll(/\b(met|missed) in (every run|runs? ([\d,–\- and]+?))(?= \(|;|$)/g)) {
        const which = m[1] as 'met' | 'missed';
        said[which].push(...(m[2] === 'every run' ? [...runs.keys()] : runList(m[3]!)));
      }
      const sort = (a: number[]) => [...a].sort((x, y) => x - y);
      expect(sort(said.met), `${id} met: "${history}"`).toEqual(sort(met));
      expect(sort(said.missed), `${id} missed: "${history}"`).toEqual(sort(missed));
    }
  });
});
