/** The demo's timeline: the events in order, then one bar per worker. */
import type { Palette } from './common.js';
import type { DemoEvent } from './demo-worker.js';

export interface NemesisEvent {
  t: number;
  worker: string;
  what: 'paused' | 'resumed';
}

type Any = DemoEvent | NemesisEvent;

const WIDTH = 60;

export function renderTimeline(
  events: readonly Any[],
  workers: readonly string[],
  p: Palette,
  t0: number,
  /** How a fence is shown (the demo shows them from 1). */
  fence: (f: string | undefined) => string = (f) => f ?? '?',
): string {
  const colours = [p.cyan, p.magenta, p.yellow, p.blue, p.green];
  const colourOf = (w: string) => colours[workers.indexOf(w) % colours.length]!;
  const sorted = [...events].sort((a, b) => a.t - b.t);
  if (sorted.length === 0) return '';
  const end = Math.max(...sorted.map((e) => e.t)) - t0;
  const pad = Math.max(...workers.map((w) => w.length));
  const lines: string[] = [];
  for (const e of sorted) {
    const time = ((e.t - t0) / 1000).toFixed(3).padStart(7);
    const who = colourOf(e.worker)(e.worker.padEnd(pad));
    lines.push(`  ${p.dim(time)}  ${who}  ${describe(e, p, fence)}`);
  }
  lines.push('');
  // bars: █ holding a valid lease, ▒ paused while it believed it held one, ✗ its late write rejected
  const scale = (t: number) => Math.min(WIDTH - 1, Math.max(0, Math.floor(((t - t0) / Math.max(1, end)) * WIDTH)));
  const ruler = `  ${' '.repeat(pad)}  ${'0s'.padEnd(WIDTH - 6)}${`${(end / 1000).toFixed(1)}s`.padStart(6)}`;
  lines.push(p.dim(ruler));
  for (const w of workers) {
    const cells = Array.from({ length: WIDTH }, () => p.dim('·'));
    const mine = sorted.filter((e) => e.worker === w);
    let heldFrom: number | null = null;
    let pausedFrom: number | null = null;
    for (const e of mine) {
      if (e.what === 'granted') heldFrom = e.t;
      if ((e.what === 'released' || e.what === 'lost') && heldFrom !== null) {
        for (let i = scale(heldFrom); i <= scale(e.t); i++) if (cells[i] === p.dim('·')) cells[i] = colourOf(w)('█');
        heldFrom = null;
      }
      if (e.what === 'paused') pausedFrom = e.t;
      if (e.what === 'resumed' && pausedFrom !== null) {
        for (let i = scale(pausedFrom); i <= scale(e.t); i++) cells[i] = p.red('▒');
        pausedFrom = null;
      }
    }
    for (const e of mine) if (e.what === 'rejected') cells[scale(e.t)] = p.bold(p.red('✗'));
    lines.push(`  ${colourOf(w)(w.padEnd(pad))}  ${cells.join('')}`);
  }
  lines.push(
    `  ${' '.repeat(pad)}  ${p.dim('█ holds the lock   ▒ paused (SIGSTOP), still believes it holds   ✗ stale write rejected')}`,
  );
  return lines.join('\n');
}

function describe(e: Any, p: Palette, fence: (f: string | undefined) => string): string {
  switch (e.what) {
    case 'granted':
      return `${p.bold('●')} granted, fence ${p.bold(fence(e.fence))}`;
    case 'accepted':
      return `${p.green('✓')} write with fence ${fence(e.fence)} accepted`;
    case 'rejected':
      return p.red(
        `${p.bold('✗')} late write with fence ${fence(e.fence)} REJECTED by the resource (it has seen fence ${fence(e.detail)})`,
      );
    case 'released':
      return e.detail === 'released' ? `○ released` : p.yellow(`○ release refused: the lock was ${e.detail}`);
    case 'lost':
      return p.yellow(`! lease.signal aborted: ${e.detail}`);
    case 'paused':
      return p.red(`⏸ paused (SIGSTOP) while holding the lock`);
    case 'resumed':
      return `▶ resumed (SIGCONT)`;
    case 'done':
      return p.dim('done');
    case 'failed':
      return p.red(`failed: ${e.detail}`);
  }
}
