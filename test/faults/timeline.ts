/**
 * A timeline picture (SVG) of one run: a row per process with its holds (a bar from the grant
 * to the end of the hold, coloured by fence; the solid part is the valid lease, the pale part
 * what the holder did past its own deadline), pauses (hatched), crashes (✕), lost-lease signals
 * (▼), accepted writes (green dot) and rejected stale writes (red ✕); a top row of nemesis
 * events; violations as red lines across.
 */
import type { Verdict } from './checker.js';
import type { Ev, ResourceEntry } from './types.js';

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function timeline(
  title: string,
  history: readonly Ev[],
  verdict: Verdict,
  endT: number,
  log: readonly ResourceEntry[],
): string {
  const procs = [...new Set(history.filter((e) => e.p >= 0).map((e) => e.p))].sort((a, b) => a - b);
  const row = new Map(procs.map((p, i) => [p, i]));
  const pxPerMs = Math.max(0.05, Math.min(0.5, 8000 / Math.max(1, endT)));
  const left = 60;
  const top = 84;
  const rowH = 26;
  const W = Math.ceil(left + endT * pxPerMs + 30);
  const H = top + procs.length * rowH + 40;
  const x = (t: number) => (left + t * pxPerMs).toFixed(1);
  const y = (p: number) => top + (row.get(p) ?? 0) * rowH;
  const hue = (fence: string) => (Number(BigInt(fence) % 360n) * 137) % 360;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="monospace" font-size="10">`,
    `<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
      `<line x1="0" y1="0" x2="0" y2="6" stroke="#888" stroke-width="2"/></pattern></defs>`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="8" y="16" font-size="13" font-weight="bold">${esc(title)} — ${verdict.ok ? 'no violations' : `${verdict.violations.length} violation(s)`}</text>`,
    `<text x="8" y="30">acq ${verdict.counts.acquisitions} · writes ok ${verdict.counts.writesAccepted} · stale rejected ${verdict.counts.staleWritesRejected} · faults ${verdict.counts.faults} · overlaps ${verdict.counts.overlaps} · lost ${verdict.counts.lostSignalled}</text>`,
    `<text x="8" y="44" fill="#555">bar: a hold from its grant (solid: valid by the holder's own deadline; pale: held past it) · ▼ loss signalled · ● write accepted · red ✕ stale write rejected · black ✕ SIGKILL · hatched: SIGSTOPped · nemesis: orange = fault</text>`,
  );
  // time axis
  const step = endT > 60_000 ? 10_000 : endT > 10_000 ? 1000 : 500;
  for (let t = 0; t <= endT; t += step) {
    out.push(`<line x1="${x(t)}" y1="${top - 12}" x2="${x(t)}" y2="${H - 30}" stroke="#eee"/>`);
    out.push(`<text x="${x(t)}" y="${H - 18}" text-anchor="middle">${(t / 1000).toFixed(t % 1000 ? 1 : 0)}s</text>`);
  }
  // nemesis row
  for (const e of history) {
    if (e.p !== -1) continue;
    const faulty = e.value?.fault === true || e.value?.losesLocks === true;
    out.push(
      `<line x1="${x(e.t)}" y1="${top - 30}" x2="${x(e.t)}" y2="${top - 16}" stroke="${faulty ? '#c60' : '#999'}" stroke-width="2"><title>${esc(
        `${(e.t / 1000).toFixed(3)}s ${e.f} ${JSON.stringify(e.value ?? {})}`,
      )}</title></line>`,
    );
    if (typeof e.value?.ms === 'number' && e.value.target === undefined) {
      out.push(
        `<rect x="${x(e.t)}" y="${top - 30}" width="${(e.value.ms * pxPerMs).toFixed(1)}" height="8" fill="#c60" opacity="0.3"/>`,
      );
    }
  }
  out.push(`<text x="4" y="${top - 20}">nemesis</text>`);
  for (const p of procs) out.push(`<text x="4" y="${y(p) + 14}">p${p}</text>`);
  // pauses
  const pauses = new Map<number, number>();
  for (const e of history) {
    const target = e.value?.target;
    if (e.p !== -1 || typeof target !== 'number' || !row.has(target)) continue;
    if (e.f === 'pause-process') pauses.set(target, e.t);
    if (e.f === 'resume-process' && pauses.has(target)) {
      const a = pauses.get(target)!;
      pauses.delete(target);
      out.push(
        `<rect x="${x(a)}" y="${y(target)}" width="${((e.t - a) * pxPerMs).toFixed(1)}" height="${rowH - 6}" fill="url(#hatch)" opacity="0.6"><title>paused ${(e.t - a).toFixed(0)}ms</title></rect>`,
      );
    }
  }
  // holds
  for (const h of verdict.holds) {
    const c = `hsl(${hue(h.fence)},65%,55%)`;
    const w = Math.max(1, (h.end - h.okT) * pxPerMs);
    const wv = Math.max(0, (h.validEnd - h.okT) * pxPerMs);
    out.push(
      `<rect x="${x(h.okT)}" y="${y(h.p) + 3}" width="${w.toFixed(1)}" height="${rowH - 12}" fill="${c}" opacity="0.35"><title>${esc(
        `p${h.p} fence ${h.fence}: granted ${h.okT.toFixed(1)}ms, deadline ${h.deadline.toFixed(1)}ms, end ${h.end.toFixed(1)}ms` +
          (h.lostT !== undefined ? `, lost signalled ${h.lostT.toFixed(1)}ms` : ''),
      )}</title></rect>`,
      `<rect x="${x(h.okT)}" y="${y(h.p) + 3}" width="${wv.toFixed(1)}" height="${rowH - 12}" fill="${c}"/>`,
    );
    if (w > 24)
      out.push(`<text x="${(Number(x(h.okT)) + 2).toFixed(1)}" y="${y(h.p) + 13}" fill="#000">${h.fence}</text>`);
    if (h.lostT !== undefined) {
      out.push(`<text x="${x(h.lostT)}" y="${y(h.p) + 2}" fill="#d80" text-anchor="middle">▼</text>`);
    }
    if (h.crashT !== undefined) {
      out.push(`<text x="${x(h.crashT)}" y="${y(h.p) + 16}" fill="#000" font-size="14" text-anchor="middle">✕</text>`);
    }
  }
  // writes (outcome from the resource's log)
  const outcome = new Map(log.filter((e) => e.op === 'write').map((e) => [e.id, e.accepted]));
  for (const e of history) {
    if (e.f !== 'write' || e.type !== 'invoke') continue;
    const ok = outcome.get(String(e.value?.id));
    const cy = y(e.p) + rowH - 6;
    if (ok === true) out.push(`<circle cx="${x(e.t)}" cy="${cy}" r="2.5" fill="#080"/>`);
    else if (ok === false) {
      out.push(
        `<text x="${x(e.t)}" y="${cy + 4}" fill="#d00" font-size="12" text-anchor="middle">✕<title>stale write, fence ${e.fence}</title></text>`,
      );
    }
  }
  for (const v of verdict.violations) {
    if (v.t === undefined) continue;
    out.push(
      `<line x1="${x(v.t)}" y1="${top - 14}" x2="${x(v.t)}" y2="${H - 30}" stroke="red" stroke-width="1.5"><title>${esc(`${v.check}: ${v.message}`)}</title></line>`,
    );
  }
  out.push('</svg>');
  return out.join('\n');
}
