/** The checker on hand-made histories: it passes a clean one and names each kind of violation. */
import { describe, expect, test } from 'vitest';
import { check, type CheckOptions } from './checker.js';
import type { Ev, ResourceEntry } from './types.js';

const ev = (t: number, p: number, type: Ev['type'], f: string, fence?: string, value?: Ev['value']): Ev => ({
  t,
  p,
  type,
  f,
  ...(fence !== undefined ? { fence } : {}),
  ...(value !== undefined ? { value } : {}),
});

/** One full cycle of process p with `fence`: acquire at a, write at w, release at r. */
function cycle(
  p: number,
  fence: string,
  a: number,
  w: number,
  r: number,
  o: { deadline?: number; released?: boolean } = {},
) {
  const id = `${p}.${fence}`;
  return [
    ev(a - 1, p, 'invoke', 'acquire'),
    ev(a, p, 'ok', 'acquire', fence, { deadline: o.deadline ?? a + 1000 }),
    ev(a + 1, p, 'invoke', 'read', fence, { id }),
    ev(a + 2, p, 'ok', 'read', fence, { value: 0 }),
    ev(w, p, 'invoke', 'write', fence, { id, value: 0, from: 0 }),
    ev(w + 1, p, 'ok', 'write', fence, { value: 0 }),
    ev(r, p, 'invoke', 'release', fence),
    ev(r + 1, p, 'ok', 'release', fence, { released: o.released ?? true }),
  ];
}

/** The resource's log for accepted read+write pairs in this order. */
function chain(...fences: [string, string][]): ResourceEntry[] {
  const log: ResourceEntry[] = [];
  fences.forEach(([fence, id], i) => {
    log.push({ seq: log.length + 1, op: 'read', fence, accepted: true, highest: '0', value: i, id });
    log.push({ seq: log.length + 1, op: 'write', fence, accepted: true, highest: fence, value: i + 1, from: i, id });
  });
  return log;
}

const opts = (o: Partial<CheckOptions> = {}): CheckOptions => ({
  ttlMs: 900,
  overlaps: 'forbidden',
  endT: 10_000,
  ...o,
});
const sorted = (xs: Ev[]) => xs.sort((a, b) => a.t - b.t);
const checks = (v: ReturnType<typeof check>) => [...new Set(v.violations.map((x) => x.check))].sort();

describe('faults checker', () => {
  test('a clean history passes', () => {
    const h = sorted([...cycle(0, '1', 10, 40, 50), ...cycle(1, '2', 60, 90, 100)]);
    const v = check(h, chain(['1', '0.1'], ['2', '1.2']), 2, opts());
    expect(v.violations).toEqual([]);
    expect(v.counts).toMatchObject({ acquisitions: 2, writesAccepted: 2, overlaps: 0 });
  });

  test('a fence granted twice, and a lower fence after a higher one', () => {
    const h = sorted([...cycle(0, '5', 10, 40, 50), ...cycle(1, '5', 60, 90, 100), ...cycle(0, '3', 120, 130, 140)]);
    const v = check(h, chain(['5', '0.5'], ['5', '1.5']), 2, opts());
    expect(checks(v)).toEqual(['fence-order', 'fence-unique', 'history']);
  });

  test('overlapping holds: a violation without pauses; only counted with them, if the first had expired', () => {
    const h = sorted([...cycle(0, '1', 10, 40, 300, { deadline: 250 }), ...cycle(1, '2', 100, 120, 130)]);
    const log = chain(['1', '0.1'], ['2', '1.2']);
    expect(checks(check(h, log, 2, opts()))).toEqual(['overlap', 'overlap-valid']);
    // with pauses allowed: the second grant came while the first was still valid — still wrong
    expect(checks(check(h, log, 2, opts({ overlaps: 'expected' })))).toEqual(['overlap-valid']);
    // the first holder's own deadline passed before the second grant: expected, and counted
    const late = sorted([
      ...cycle(0, '1', 10, 40, 300, { deadline: 90 }),
      ev(240, 0, 'info', 'lost', '1', { reason: 'expired' }),
      ...cycle(1, '2', 100, 120, 130),
      ev(20, -1, 'info', 'pause-process', undefined, { target: 0, fault: true }),
      ev(230, -1, 'info', 'resume-process', undefined, { target: 0 }),
    ]);
    const v = check(late, log, 2, opts({ overlaps: 'expected' }));
    expect(v.violations).toEqual([]);
    expect(v.counts.overlaps).toBe(1);
  });

  test('the resource accepting a stale fence, and a lost update (a write-only fence lets it through)', () => {
    // p0 (fence 1) reads 0 and is paused; p1 (fence 2) reads 0; p0 writes 1 before p1's first
    // write; p1 writes 1 from its stale read. A resource that fences writes only accepts both.
    const h = sorted([
      ...cycle(0, '1', 10, 400, 410, { deadline: 100 }),
      ev(120, 0, 'info', 'lost', '1'),
      ...cycle(1, '2', 150, 450, 460),
    ]);
    const log: ResourceEntry[] = [
      { seq: 1, op: 'read', fence: '1', accepted: true, highest: '0', value: 0, id: '0.1' },
      { seq: 2, op: 'read', fence: '2', accepted: true, highest: '1', value: 0, id: '1.2' },
      { seq: 3, op: 'write', fence: '1', accepted: true, highest: '2', value: 1, from: 0, id: '0.1' },
      { seq: 4, op: 'write', fence: '2', accepted: true, highest: '2', value: 1, from: 0, id: '1.2' },
    ];
    const v = check(h, log, 1, opts({ overlaps: 'expected' }));
    expect(checks(v)).toEqual(['lost-update', 'stale-accepted']);
    expect(v.counts.lateWrites).toBe(1);
  });

  test('a lost lease must be signalled within a renewal interval of becoming detectable', () => {
    // deadline 200, held until 2000, never signalled
    const never = sorted(cycle(0, '1', 10, 1900, 2000, { deadline: 200 }));
    expect(checks(check(never, chain(['1', '0.1']), 1, opts()))).toEqual(['signal']);
    // signalled 500ms after the deadline (interval 300 + slack 150 = 450): late
    const late = sorted([...cycle(0, '1', 10, 1900, 2000, { deadline: 200 }), ev(700, 0, 'info', 'lost', '1')]);
    expect(checks(check(late, chain(['1', '0.1']), 1, opts()))).toEqual(['signal']);
    // paused across the deadline: detectable at the resume (1500), signalled at 1510: fine
    const paused = sorted([
      ...cycle(0, '1', 10, 1900, 2000, { deadline: 200 }),
      ev(50, -1, 'info', 'pause-process', undefined, { target: 0 }),
      ev(1500, -1, 'info', 'resume-process', undefined, { target: 0 }),
      ev(1510, 0, 'info', 'lost', '1'),
    ]);
    expect(check(paused, chain(['1', '0.1']), 1, opts({ overlaps: 'expected' })).violations).toEqual([]);
  });

  test('a release that finds the lease gone, with no renewal tried for too long, is a missed signal', () => {
    const silent = sorted(cycle(0, '1', 10, 590, 600, { released: false, deadline: 5000 }));
    expect(checks(check(silent, chain(['1', '0.1']), 1, opts({ ttlMs: 9000 })))).toEqual([]); // interval 3000
    expect(checks(check(silent, chain(['1', '0.1']), 1, opts({ ttlMs: 900 })))).toEqual(['signal']);
    const tried = sorted([...silent, ev(400, 0, 'info', 'renew', '1', { ok: false, error: 'timeout' })]);
    expect(checks(check(tried, chain(['1', '0.1']), 1, opts({ ttlMs: 900 })))).toEqual([]);
  });

  test('a fault that destroys locks excuses the overlap, not a missing signal', () => {
    const h = sorted([
      ...cycle(0, '1', 10, 40, 800),
      ev(50, -1, 'info', 'terminate-backend', undefined, { targets: [0], losesLocks: true }),
      ev(55, 0, 'info', 'lost', '1'),
      ...cycle(1, '2', 52, 120, 130),
    ]);
    const v = check(h, chain(['1', '0.1'], ['2', '1.2']), 2, opts());
    expect(v.violations).toEqual([]);
    expect(v.counts.overlapsExcused).toBe(1);
    const unsignalled = h.filter((e) => e.f !== 'lost');
    expect(checks(check(unsignalled, chain(['1', '0.1'], ['2', '1.2']), 2, opts()))).toEqual(['signal']);
  });

  test('a fault aimed at a grant still on its way to the client excuses the overlap; one aimed at the previous hold does not', () => {
    // p0 invoked at 9, the server granted it, the harness saw p0 holding and terminated its
    // session at 12 (before p0's answer came at 20); p1 was granted at 30 and p0 heard at 45
    const onItsWay = sorted([
      ev(9, 0, 'invoke', 'acquire'),
      ...cycle(0, '1', 20, 40, 800).filter((e) => !(e.f === 'acquire' && e.type === 'invoke')),
      ev(12, -1, 'info', 'terminate-backend', undefined, { targets: [0], losesLocks: true }),
      ev(45, 0, 'info', 'lost', '1'),
      ...cycle(1, '2', 30, 120, 130),
    ]);
    const v = check(onItsWay, chain(['1', '0.1'], ['2', '1.2']), 2, opts());
    expect(v.violations).toEqual([]);
    expect(v.counts.overlapsExcused).toBe(1);
    // the same, but p0 never heard of a loss (the fault ended a grant it did not claim): no excuse
    const unheard = onItsWay.filter((e) => e.f !== 'lost');
    expect(checks(check(unheard, chain(['1', '0.1'], ['2', '1.2']), 2, opts()))).toEqual(['overlap', 'overlap-valid']);
    // the same fault before p0 invoked (it hit p0's previous hold): no excuse
    const before = onItsWay.map((e) => (e.f === 'terminate-backend' ? { ...e, t: 8 } : e));
    expect(checks(check(sorted(before), chain(['1', '0.1'], ['2', '1.2']), 2, opts()))).toEqual([
      'overlap',
      'overlap-valid',
    ]);
  });

  test('a fault that may break locks (a Redlock minority restarted empty) excuses the overlap, and asks no signal', () => {
    const h = sorted([
      ...cycle(0, '1', 10, 40, 800),
      ev(50, -1, 'info', 'nodes-up-empty', undefined, { nodes: [7401, 7402], mayBreakLocks: true }),
      ...cycle(1, '2', 52, 120, 130),
    ]);
    const v = check(h, chain(['1', '0.1'], ['2', '1.2']), 2, opts({ overlaps: 'expected' }));
    expect(v.violations).toEqual([]);
    expect(v.counts.overlapsExcused).toBe(1);
    // without the fault the same overlap is a violation
    const plain = h.filter((e) => e.p !== -1);
    expect(checks(check(plain, chain(['1', '0.1'], ['2', '1.2']), 2, opts({ overlaps: 'expected' })))).toContain(
      'overlap-valid',
    );
  });

  test('a fault that lasted a span (two Sentinel masters) excuses grants anywhere in it, and nothing outside it', () => {
    // p0 granted at 40 (on the old master), p1 at 120 (on the new one); the old master was
    // replaced at `sinceT` and turned into a replica at 300, when the span was recorded
    const at = (sinceT: number, t = 300) =>
      sorted([
        ...cycle(0, '1', 40, 80, 800),
        ...cycle(1, '2', 120, 160, 170),
        ev(t, -1, 'info', 'sentinel-convert-to-replica', undefined, { port: 7311, mayBreakLocks: true, sinceT }),
      ]);
    const run = (h: ReturnType<typeof at>) =>
      check(h, chain(['1', '0.1'], ['2', '1.2']), 2, opts({ overlaps: 'expected' }));
    for (const sinceT of [20, 60, 120]) {
      const v = run(at(sinceT));
      expect(v.violations, `since ${sinceT}`).toEqual([]);
      expect(v.counts.overlapsExcused).toBe(1);
    }
    // the span began after both grants, or ended before the first: it explains nothing
    expect(checks(run(at(130)))).toContain('overlap-valid');
    expect(checks(run(at(10, 30)))).toContain('overlap-valid');
  });
});
