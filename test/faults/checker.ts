/**
 * The history checker. Input: the run's history (every event on one monotonic clock, relative to
 * the run's start), the resource's own log, and what the schedule allows. Checks:
 *
 *  fence-unique     no fence is granted twice.
 *  fence-order      fences strictly increase in grant order: if grant X completed before grant Y
 *                   was invoked (real time), fence(X) < fence(Y). Concurrent grants are unordered.
 *  stale-accepted   the resource never accepts a fence lower than one it accepted before.
 *  lost-update      accepted writes form the chain 0 → 1 → 2 …: each read the value of the
 *                   previous accepted write, and the final value is the number of accepted writes.
 *  history          the workers' reports agree with the resource's log (an `ok` write is in it as
 *                   accepted, a `fail` one as rejected).
 *  overlap          hold = [ok acquire, first of: release invoked, loss signalled, crash]. Two holds
 *                   that overlap are a violation in schedules without pauses or delays. With them,
 *                   overlaps are expected (a paused holder outlives its lease) and only counted.
 *  overlap-valid    in every schedule: the *valid* part of a hold (up to the holder's own deadline,
 *                   as `lease.remaining()` tells it, moved by each successful renewal) never
 *                   overlaps another hold's valid part. Excused only by a fault that destroys locks
 *                   on the server (a session ended by pg_terminate_backend, a restart without
 *                   persistence: `losesLocks`) or may break them (a Redlock minority restarted
 *                   empty: `mayBreakLocks`, no signal due) between the two grants (or one that
 *                   lasted a span, `sinceT` to its record, that reaches from before the second
 *                   grant to after the first: two Sentinel masters at once); a fault aimed
 *                   at the first holder's process (pg_terminate_backend of the sessions holding
 *                   the key) counts from its acquire's invoke when that hold was signalled lost:
 *                   the server holds a grant before its answer reaches the client, and the
 *                   fault destroys it on its way.
 *  signal           every lost lease was signalled (lease.signal aborted with LeaseLostError)
 *                   within one renewal interval (ttl/3) + slack after the loss became detectable:
 *                   - its deadline passed while the holder still held it: detectable at the
 *                     deadline, or when the holder resumed if it was paused then;
 *                   - a lock-destroying fault hit it after its grant's answer: detectable at
 *                     the fault;
 *                   - release returned false without a signal: a violation if the holder had gone
 *                     more than one interval without a renewal outcome (its keeper should have
 *                     probed and found out), unless a renewal was still in flight or the release
 *                     itself waited long (then the loss may have come after the release was sent).
 */
import type { Ev, ResourceEntry } from './types.js';

export interface CheckOptions {
  ttlMs: number;
  /** 'forbidden': no pauses or delays in the schedule, so holds must not overlap at all. */
  overlaps: 'forbidden' | 'expected';
  /** Allowance for event-loop lag, IPC and a round trip (ms). */
  slackMs?: number;
  /** When the run ended (ms, relative). */
  endT: number;
}

export interface Hold {
  p: number;
  fence: string;
  invokeT: number;
  okT: number;
  /** The holder's own deadline (updated by renewals). */
  deadline: number;
  lostT?: number;
  relT?: number;
  /** When the release's answer came. */
  relDoneT?: number;
  released?: boolean;
  crashT?: number;
  /** Successful (ok) and failed (!ok) renewal outcomes. */
  probes: { t: number; ok: boolean; error?: string }[];
  /** End as the holder saw it: release invoked, loss signalled, crash or the run's end. */
  end: number;
  /** End of validity: min(end, deadline). */
  validEnd: number;
}

export interface Violation {
  check: string;
  message: string;
  t?: number;
  p?: number;
  fence?: string;
}

export interface Counts {
  acquisitions: number;
  acquireFailures: number;
  writesAccepted: number;
  staleWritesRejected: number;
  staleReadsRejected: number;
  /** Writes invoked after the writer's own deadline or loss signal. */
  lateWrites: number;
  /** … of which the resource accepted (no newer holder had reached it yet: harmless). */
  lateWritesAccepted: number;
  lostSignalled: number;
  silentLosses: number;
  crashes: number;
  faults: number;
  overlaps: number;
  overlapsExcused: number;
  validOverlaps: number;
}

export interface Verdict {
  ok: boolean;
  violations: Violation[];
  counts: Counts;
  holds: Hold[];
}

const big = (s: string | undefined) => BigInt(s ?? '0');

export function pausesOf(history: readonly Ev[], endT: number): Map<number, [number, number][]> {
  const out = new Map<number, [number, number][]>();
  for (const e of history) {
    if (e.p !== -1) continue;
    const target = e.value?.target;
    if (typeof target !== 'number') continue;
    const list = out.get(target) ?? [];
    if (e.f === 'pause-process') list.push([e.t, endT]);
    else if (e.f === 'resume-process' && list.length > 0) list[list.length - 1]![1] = e.t;
    out.set(target, list);
  }
  return out;
}

export function buildHolds(history: readonly Ev[], endT: number): Hold[] {
  const holds: Hold[] = [];
  const byKey = new Map<string, Hold>();
  const invoked = new Map<number, number>();
  const open = new Map<number, Set<Hold>>();
  for (const e of history) {
    if (e.p < 0) continue;
    const key = `${e.p}:${e.fence}`;
    if (e.f === 'acquire' && e.type === 'invoke') invoked.set(e.p, e.t);
    else if (e.f === 'acquire' && e.type === 'ok') {
      const h: Hold = {
        p: e.p,
        fence: e.fence!,
        invokeT: invoked.get(e.p) ?? e.t,
        okT: e.t,
        deadline: Number(e.value?.deadline ?? e.t),
        probes: [],
        end: endT,
        validEnd: endT,
      };
      holds.push(h);
      byKey.set(key, h);
      if (!open.has(e.p)) open.set(e.p, new Set());
      open.get(e.p)!.add(h);
    } else if (e.f === 'renew') {
      const h = byKey.get(key);
      if (!h) continue;
      const probe: Hold['probes'][number] = { t: e.t, ok: e.value?.ok === true };
      if (typeof e.value?.error === 'string') probe.error = e.value.error;
      h.probes.push(probe);
      if (probe.ok && typeof e.value?.deadline === 'number') h.deadline = Math.max(h.deadline, e.value.deadline);
    } else if (e.f === 'lost') {
      const h = byKey.get(key);
      if (h && h.lostT === undefined) h.lostT = e.t;
    } else if (e.f === 'release') {
      const h = byKey.get(key);
      if (!h) continue;
      if (e.type === 'invoke') {
        h.relT = e.t;
        open.get(e.p)?.delete(h);
      } else if (e.type === 'ok') {
        h.released = e.value?.released === true;
        h.relDoneT = e.t;
      }
    } else if (e.f === 'crash') {
      for (const h of open.get(e.p) ?? []) h.crashT = e.t;
      open.get(e.p)?.clear();
    }
  }
  for (const h of holds) {
    h.end = Math.min(h.relT ?? Infinity, h.lostT ?? Infinity, h.crashT ?? Infinity, endT);
    h.validEnd = Math.min(h.end, h.deadline);
  }
  return holds;
}

export function check(
  history: readonly Ev[],
  log: readonly ResourceEntry[],
  finalValue: number,
  o: CheckOptions,
): Verdict {
  const slack = o.slackMs ?? 150;
  const interval = Math.max(1, Math.floor(o.ttlMs / 3));
  const v: Violation[] = [];
  const holds = buildHolds(history, o.endT);
  const pauses = pausesOf(history, o.endT);
  const pausedIn = (p: number, a: number, b: number) => (pauses.get(p) ?? []).some(([x, y]) => x < b && y > a);
  const resumeAfter = (p: number, t: number) => {
    for (const [x, y] of pauses.get(p) ?? []) if (x <= t && t < y) return y;
    return t;
  };
  const destroyers = history.filter((e) => e.p === -1 && e.value?.losesLocks === true);
  const breakers = history.filter(
    (e) => e.p === -1 && (e.value?.losesLocks === true || e.value?.mayBreakLocks === true),
  );
  /**
   * From when a fault destroys hold h: its grant; for a fault aimed at h's process (the harness
   * aims only at a process whose session holds the key at that moment), from its acquire's
   * invoke if h was then signalled lost: the server holds a grant before its answer reaches the
   * client, and a fault meanwhile destroys the grant the client then claims.
   */
  const hitFrom = (h: Hold, e: Ev) => (Array.isArray(e.value?.targets) && h.lostT !== undefined ? h.invokeT : h.okT);
  const aimedAt = (h: Hold, e: Ev) => {
    const targets = e.value?.targets;
    return !Array.isArray(targets) || targets.includes(h.p);
  };
  // a fault with `sinceT` lasted from then until it was recorded (two Sentinel masters taking
  // writes until the old one was turned into a replica): it excuses two grants anywhere in it
  const since = (e: Ev) => (typeof e.value?.sinceT === 'number' ? e.value.sinceT : e.t);
  const destroyedBetween = (h: Hold, b: number) =>
    breakers.some((e) => e.t > hitFrom(h, e) && since(e) <= b && aimedAt(h, e));
  const counts: Counts = {
    acquisitions: holds.length,
    acquireFailures: history.filter((e) => e.f === 'acquire' && e.type === 'fail').length,
    writesAccepted: 0,
    staleWritesRejected: 0,
    staleReadsRejected: 0,
    lateWrites: 0,
    lateWritesAccepted: 0,
    lostSignalled: holds.filter((h) => h.lostT !== undefined).length,
    silentLosses: 0,
    crashes: history.filter((e) => e.f === 'crash').length,
    faults: history.filter((e) => e.p === -1 && e.value?.fault === true).length,
    overlaps: 0,
    overlapsExcused: 0,
    validOverlaps: 0,
  };

  // fence-unique
  const seen = new Map<string, Hold>();
  for (const h of holds) {
    const other = seen.get(h.fence);
    if (other) {
      v.push({
        check: 'fence-unique',
        message: `fence ${h.fence} granted to p${other.p} at ${other.okT.toFixed(1)}ms and again to p${h.p} at ${h.okT.toFixed(1)}ms`,
        t: h.okT,
        p: h.p,
        fence: h.fence,
      });
    } else seen.set(h.fence, h);
  }

  // fence-order (real-time order of grants)
  const byOk = [...holds].sort((a, b) => a.okT - b.okT);
  const byInvoke = [...holds].sort((a, b) => a.invokeT - b.invokeT);
  let i = 0;
  let top: Hold | null = null;
  for (const y of byInvoke) {
    while (i < byOk.length && byOk[i]!.okT < y.invokeT) {
      const x = byOk[i++]!;
      if (!top || big(x.fence) > big(top.fence)) top = x;
    }
    if (top && big(top.fence) >= big(y.fence)) {
      v.push({
        check: 'fence-order',
        message:
          `p${y.p} was granted fence ${y.fence} (invoked ${y.invokeT.toFixed(1)}ms) after p${top.p} had been granted ` +
          `fence ${top.fence} (at ${top.okT.toFixed(1)}ms)`,
        t: y.okT,
        p: y.p,
        fence: y.fence,
      });
    }
  }

  // resource: monotonic fences, no lost update
  let highest = 0n;
  let last = 0;
  const accepted = new Map<string, ResourceEntry>();
  const rejected = new Map<string, ResourceEntry>();
  for (const e of log) {
    const f = big(e.fence);
    if (e.accepted) {
      if (f < highest) {
        v.push({
          check: 'stale-accepted',
          message: `the resource accepted a ${e.op} with fence ${e.fence} after fence ${highest} (log #${e.seq}, op ${e.id})`,
          fence: e.fence,
        });
      }
      if (f > highest) highest = f;
      if (e.op === 'write') {
        counts.writesAccepted++;
        accepted.set(e.id, e);
        if (e.from !== last || e.value !== last + 1) {
          v.push({
            check: 'lost-update',
            message: `write ${e.id} (fence ${e.fence}) wrote ${e.value} from a read of ${e.from}, but the last accepted write had left ${last} (log #${e.seq})`,
            fence: e.fence,
          });
        }
        last = e.value;
      }
    } else {
      if (e.op === 'write') {
        counts.staleWritesRejected++;
        rejected.set(e.id, e);
      } else counts.staleReadsRejected++;
      if (f >= highest) {
        v.push({
          check: 'resource',
          message: `the resource rejected fence ${e.fence} though the highest it had accepted was ${highest} (log #${e.seq})`,
        });
      }
    }
  }
  if (finalValue !== last || finalValue !== counts.writesAccepted) {
    v.push({
      check: 'lost-update',
      message: `the resource ends at ${finalValue}, its last accepted write left ${last}, and it accepted ${counts.writesAccepted} writes`,
    });
  }

  // history vs the resource's log; late writes
  const holdOf = new Map(holds.map((h) => [`${h.p}:${h.fence}`, h]));
  const writeIds = new Map<string, Ev>();
  for (const e of history) {
    if (e.f !== 'write' || e.p < 0) continue;
    if (e.type === 'invoke') {
      const id = String(e.value?.id);
      writeIds.set(`${e.p}:${e.fence}`, e);
      const h = holdOf.get(`${e.p}:${e.fence}`);
      if (h && e.t > h.validEnd) {
        counts.lateWrites++;
        if (accepted.has(id)) counts.lateWritesAccepted++;
      }
    } else if (e.type === 'ok' || e.type === 'fail') {
      const id = String(writeIds.get(`${e.p}:${e.fence}`)?.value?.id);
      const inLog = e.type === 'ok' ? accepted.has(id) : rejected.has(id);
      if (!inLog) {
        v.push({
          check: 'history',
          message: `p${e.p} reported write ${id} (fence ${e.fence}) as ${e.type}, the resource's log disagrees`,
          t: e.t,
          p: e.p,
          fence: e.fence,
        });
      }
    }
  }

  // overlaps
  for (let a = 0; a < byOk.length; a++) {
    const x = byOk[a]!;
    for (let b = a + 1; b < byOk.length; b++) {
      const y = byOk[b]!;
      if (y.okT >= x.end && y.okT >= x.validEnd) break;
      if (y.p === x.p) continue;
      const excused = destroyedBetween(x, y.okT);
      if (y.okT < x.end) {
        counts.overlaps++;
        if (excused) counts.overlapsExcused++;
        else if (o.overlaps === 'forbidden') {
          v.push({
            check: 'overlap',
            message:
              `p${x.p} (fence ${x.fence}) held [${x.okT.toFixed(1)}, ${x.end.toFixed(1)}]ms and p${y.p} (fence ${y.fence}) ` +
              `was granted at ${y.okT.toFixed(1)}ms, in a schedule without pauses or delays`,
            t: y.okT,
            p: y.p,
            fence: y.fence,
          });
        }
      }
      if (y.okT < x.validEnd && y.validEnd > y.okT) {
        counts.validOverlaps++;
        if (!excused) {
          v.push({
            check: 'overlap-valid',
            message:
              `p${x.p}'s lease (fence ${x.fence}) was valid until ${x.validEnd.toFixed(1)}ms by its own clock, ` +
              `yet p${y.p} was granted fence ${y.fence} at ${y.okT.toFixed(1)}ms (valid until ${y.validEnd.toFixed(1)}ms)`,
            t: y.okT,
            p: y.p,
            fence: y.fence,
          });
        }
      }
    }
  }

  // signalling
  for (const h of holds) {
    const believedUntil = Math.min(h.relT ?? Infinity, h.crashT ?? Infinity, o.endT);
    if (h.crashT !== undefined && h.crashT <= h.deadline) continue;
    const dues: { due: number; why: string }[] = [];
    if (believedUntil > h.deadline + slack) {
      dues.push({
        due: resumeAfter(h.p, h.deadline) + interval + slack,
        why: `its deadline passed at ${h.deadline.toFixed(1)}ms`,
      });
    }
    for (const d of destroyers) {
      // only faults after the grant's answer: one while the acquire was on its way may have ended
      // a grant the backend then refused to claim, and the grant that came next is intact
      if (d.t > h.okT && d.t < believedUntil && aimedAt(h, d)) {
        dues.push({ due: resumeAfter(h.p, d.t) + interval + slack, why: `${d.f} destroyed it at ${d.t.toFixed(1)}ms` });
      }
    }
    for (const { due, why } of dues) {
      const late = h.lostT === undefined ? believedUntil > due : h.lostT > due;
      if (late) {
        v.push({
          check: 'signal',
          message:
            `p${h.p}'s lease (fence ${h.fence}) was lost (${why}) and ` +
            (h.lostT === undefined
              ? `never signalled (held until ${believedUntil.toFixed(1)}ms)`
              : `signalled only at ${h.lostT.toFixed(1)}ms`) +
            `; due by ${due.toFixed(1)}ms`,
          t: h.lostT ?? believedUntil,
          p: h.p,
          fence: h.fence,
        });
      }
    }
    if (h.released === false && h.lostT === undefined && h.relT !== undefined) {
      counts.silentLosses++;
      const okProbes = [h.okT, ...h.probes.filter((x) => x.ok && x.t < h.relT!).map((x) => x.t)];
      const r = Math.max(...okProbes);
      // a renewal was in flight (its outcome came later), or the release itself hung (the loss may
      // have happened while it waited): the holder had no chance to know before it released
      const done = h.relDoneT ?? h.relT;
      const probing = h.probes.some((x) => x.t > r && x.t <= done);
      const hung = done - h.relT > slack;
      if (h.relT - r > interval + slack && !probing && !hung && !pausedIn(h.p, r, h.relT)) {
        v.push({
          check: 'signal',
          message:
            `p${h.p}'s release (fence ${h.fence}) found the lease gone at ${h.relT.toFixed(1)}ms without a signal, ` +
            `${(h.relT - r).toFixed(1)}ms after its last successful renewal, and no renewal was tried in between`,
          t: h.relT,
          p: h.p,
          fence: h.fence,
        });
      }
    }
  }

  return { ok: v.length === 0, violations: v, counts, holds };
}
