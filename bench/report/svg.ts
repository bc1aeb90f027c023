/**
 * Hand-written SVG of the wait per acquire under contention, one line per library, log–log:
 * x = wait, y = share of acquires that waited longer than x (100 % … 0.1 %). The body of the
 * distribution is at the top left, the tail (p99, p99.9, max) at the bottom right.
 */
import type { ContendedRun } from '../sections/contended.js';

// 12 colours (a full run draws 11 lines), then the same colours dashed: no two lines look alike
const COLORS = [
  '#1b7837',
  '#d6604d',
  '#4393c3',
  '#762a83',
  '#e08214',
  '#35978f',
  '#8c510a',
  '#e7298a',
  '#000000',
  '#a6761d',
  '#7f7f7f',
  '#1f3a93',
];
const DASHES = ['', '6 3', '2 3', '8 3 2 3'];
/** The stroke of line `i`: distinct for the first COLORS.length × DASHES.length lines. */
export function lineStyle(i: number): { color: string; dash: string } {
  return { color: COLORS[i % COLORS.length]!, dash: DASHES[Math.floor(i / COLORS.length) % DASHES.length]! };
}
const dashAttr = (dash: string) => (dash ? ` stroke-dasharray="${dash}"` : '');
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v >= 1 ? v.toFixed(2) : v.toFixed(3));

export function waitChart(runs: ContendedRun[], subtitle: string): string {
  const W = 860;
  const m = { l: 70, r: 24, t: 60 };
  const pw = W - m.l - m.r;
  const ph = 270;
  const H = m.t + ph + 64 + runs.length * 17 + 8;
  const all = runs.flatMap((r) => r.cdf.map(([, v]) => v).filter((v) => Number.isFinite(v) && v > 0));
  const lo = Math.pow(10, Math.floor(Math.log10(Math.max(0.01, Math.min(...all, 1)))));
  const hi = Math.pow(10, Math.ceil(Math.log10(Math.max(...all, 10))));
  const yMin = 1e-3; // 0.1 %
  const x = (v: number) =>
    m.l + ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * pw;
  const y = (share: number) => m.t + (-Math.log10(Math.max(share, yMin)) / -Math.log10(yMin)) * ph;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${m.l}" y="22" font-size="15" font-weight="600">Wait per acquire under contention: share of acquires that waited longer than x</text>`,
    `<text x="${m.l}" y="42" fill="#555">${esc(subtitle)}</text>`,
  ];
  for (let d = Math.log10(lo); d <= Math.log10(hi) + 1e-9; d++) {
    const px = x(Math.pow(10, d)).toFixed(1);
    out.push(`<line x1="${px}" y1="${m.t}" x2="${px}" y2="${m.t + ph}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${px}" y="${m.t + ph + 16}" text-anchor="middle" fill="#333">${fmt(Math.pow(10, d))} ms</text>`);
  }
  for (const [share, label] of [
    [1, '100 %'],
    [0.5, 'p50'],
    [0.1, 'p90'],
    [0.01, 'p99'],
    [0.001, 'p99.9'],
  ] as const) {
    const py = y(share).toFixed(1);
    out.push(`<line x1="${m.l}" y1="${py}" x2="${m.l + pw}" y2="${py}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.l - 6}" y="${(y(share) + 4).toFixed(1)}" text-anchor="end" fill="#333">${label}</text>`);
  }
  out.push(`<rect x="${m.l}" y="${m.t}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  out.push(
    `<text x="${m.l + pw / 2}" y="${m.t + ph + 34}" text-anchor="middle" fill="#333">x = wait from calling acquire until granted (ms, log scale); y = share of acquires above x (log scale)</text>`,
  );
  runs.forEach((r, i) => {
    const { color, dash } = lineStyle(i);
    // a step down at each quantile; the max sits at one acquire in n
    const pts: string[] = [];
    let prevShare = 1;
    for (const [q, v] of r.cdf) {
      if (!Number.isFinite(v)) continue;
      const share = Math.max(1 - q, 1 / Math.max(1, r.grants));
      pts.push(`${x(v).toFixed(1)},${y(prevShare).toFixed(1)}`, `${x(v).toFixed(1)},${y(share).toFixed(1)}`);
      prevShare = share;
    }
    out.push(`<polyline fill="none" stroke="${color}"${dashAttr(dash)} stroke-width="2" points="${pts.join(' ')}"/>`);
    const ly = m.t + ph + 60 + i * 17;
    out.push(
      `<line x1="${m.l}" y1="${ly - 4}" x2="${m.l + 22}" y2="${ly - 4}" stroke="${color}"${dashAttr(dash)} stroke-width="3"/>`,
    );
    out.push(
      `<text x="${m.l + 30}" y="${ly}" fill="#222">${esc(r.name)} (${esc(r.config)}): p50 ${fmt(r.wait.p50)} ms, p99 ${fmt(r.wait.p99)} ms, max ${fmt(r.wait.max)} ms; ${r.handoffsPerSec} handoffs/s</text>`,
    );
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
