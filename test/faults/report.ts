/** Verdict lines and the Markdown table of a set of scenario results. */
import type { ScenarioResult } from './harness.js';

export function verdictLine(r: ScenarioResult): string {
  const head = `${r.status.toUpperCase().padEnd(12)} ${r.backend}/${r.scenario}`;
  if (r.status === 'skip') return `${head}: skipped — ${r.skipped}`;
  const c = r.verdict?.counts;
  const counts = c
    ? `acq ${c.acquisitions}, faults ${c.faults}, writes ok ${c.writesAccepted}, stale rejected ${c.staleWritesRejected}` +
      ` (+${c.staleReadsRejected} reads), late writes ${c.lateWrites}, overlaps ${c.overlaps}, lost ${c.lostSignalled}`
    : 'no verdict';
  const bad = [
    ...(r.verdict?.violations ?? []).slice(0, 5).map((v) => `\n    ${v.check}: ${v.message}`),
    ...r.errors.slice(0, 5).map((e) => `\n    error: ${e.split('\n')[0]}`),
  ].join('');
  const more = (r.verdict?.violations.length ?? 0) > 5 ? `\n    … ${r.verdict!.violations.length - 5} more` : '';
  return `${head} (${(r.durationMs / 1000).toFixed(1)}s): ${counts}, violations ${r.verdict?.violations.length ?? '?'}${bad}${more}`;
}

export function markdownTable(results: readonly ScenarioResult[]): string {
  const lines = [
    '| backend | scenario | holds may overlap | outcome | acquisitions | faults injected | writes accepted | stale writes rejected | stale reads rejected | late writes (accepted harmlessly) | overlaps | leases lost (signalled) | violations | time |',
    '|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  const sum = { acq: 0, faults: 0, ok: 0, stale: 0, reads: 0, late: 0, overlaps: 0, lost: 0, viol: 0, ms: 0 };
  for (const r of results) {
    const c = r.verdict?.counts;
    if (r.status === 'skip' || !c) {
      lines.push(`| ${r.backend} | ${r.scenario} | | skipped: ${r.skipped ?? r.errors[0] ?? ''} | | | | | | | | | | |`);
      continue;
    }
    const viol = r.verdict!.violations.length;
    const checks = [...new Set(r.verdict!.violations.map((v) => v.check))].join(', ');
    sum.acq += c.acquisitions;
    sum.faults += c.faults;
    sum.ok += c.writesAccepted;
    sum.stale += c.staleWritesRejected;
    sum.reads += c.staleReadsRejected;
    sum.late += c.lateWrites;
    sum.overlaps += c.overlaps;
    sum.lost += c.lostSignalled;
    sum.ms += r.durationMs;
    if (!r.known) sum.viol += viol;
    const outcome =
      r.status === 'known-unsafe'
        ? `known limitation, caught (${checks})`
        : r.status === 'pass'
          ? 'pass'
          : `**FAIL** (${checks || r.errors[0]})`;
    lines.push(
      `| ${r.backend} | ${r.scenario} | ${r.overlaps === 'expected' ? 'yes' : 'no'} | ${outcome} | ${c.acquisitions} | ${c.faults} | ${c.writesAccepted} | ${c.staleWritesRejected} | ${c.staleReadsRejected} | ${c.lateWrites} (${c.lateWritesAccepted}) | ${c.overlaps} | ${c.lostSignalled} | ${viol} | ${(r.durationMs / 1000).toFixed(0)}s |`,
    );
  }
  lines.push(
    `| **all** | | | | **${sum.acq}** | **${sum.faults}** | **${sum.ok}** | **${sum.stale}** | **${sum.reads}** | ${sum.late} | ${sum.overlaps} | ${sum.lost} | **${sum.viol}** | ${(sum.ms / 1000).toFixed(0)}s |`,
  );
  return lines.join('\n');
}
