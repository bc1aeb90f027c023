/**
 * Runs one scenario: K contender processes against one backend's lock servers (through the
 * proxies), a nemesis acting on a schedule, then heal, settle, halt, read the resource's log and
 * check the history. Every event is recorded on the shared monotonic clock (see types.ts),
 * relative to the scenario's start; the nemesis's own events have p = -1.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { check, type Verdict } from './checker.js';
import { type Env, openEnv, unavailable } from './envs.js';
import { Pool, type WorkerProc } from './procs.js';
import { openResource } from './resource.js';
import type { Scenario } from './scenarios.js';
import { timeline } from './timeline.js';
import {
  type BackendName,
  type Broken,
  clock,
  type Ev,
  type FromWorker,
  rng,
  sleep,
  type WorkerConfig,
} from './types.js';

/** The longest a run waits after healing for an accepted write before it halts the workers. */
const SETTLE_MAX_MS = 15_000;

export interface RunOptions {
  durationMs: number;
  workers: number;
  ttlMs: number;
  seed: number;
  broken?: Broken;
  /** Time after healing before the workers are halted (default: one ttl). */
  settleMs?: number;
  slackMs?: number;
  /** Where to write <backend>-<scenario>.svg / .json (none: no files). */
  outDir?: string;
}

export interface ScenarioResult {
  backend: BackendName;
  scenario: string;
  overlaps: 'forbidden' | 'expected';
  /** A documented limitation: the checker is expected to report violations. */
  known?: string;
  status: 'pass' | 'fail' | 'skip' | 'known-unsafe';
  skipped?: string;
  verdict?: Verdict;
  errors: string[];
  durationMs: number;
  seed: number;
  files: string[];
}

/** What a nemesis can do. */
export interface Ctx {
  env: Env;
  rnd: ReturnType<typeof rng>;
  ttlMs: number;
  /** The lock's full key (prefix:key) as the backend stores it. */
  fullKey: string;
  /** False once the scenario's time is up: the nemesis must return soon. */
  readonly live: boolean;
  /** Sleeps, ending early when the scenario's time is up; resolves `live`. */
  sleep(ms: number): Promise<boolean>;
  /** Records a nemesis event (fault: true counts it as an injected fault). */
  record(f: string, value?: Record<string, unknown>): void;
  /** The next process that reports a successful read: it is now in the gap before its write. */
  waitGap(timeoutMs: number): Promise<Member | null>;
  /** Processes holding the lock now (acquired, not yet releasing). */
  holders(): Member[];
  /** SIGSTOP for `ms`, then SIGCONT. */
  pause(m: Member, ms: number): Promise<void>;
  /** SIGKILL; a fresh process (a new p) takes its place. */
  kill(m: Member): void;
}

export interface Member {
  p: number;
  w: WorkerProc;
}

export class Harness {
  private readonly pool = new Pool();
  private readonly envs = new Map<BackendName, Env>();

  constructor(readonly log: (line: string) => void = () => {}) {}

  /** Starts processes ahead of the first scenario. */
  warm(n: number): void {
    this.pool.warm(n);
  }

  async env(backend: BackendName): Promise<Env> {
    let e = this.envs.get(backend);
    if (!e) {
      e = await openEnv(backend);
      this.envs.set(backend, e);
    }
    return e;
  }

  async close(): Promise<void> {
    await this.pool.close();
    for (const e of this.envs.values()) await e.close().catch(() => {});
    this.envs.clear();
  }

  /** Why `scenario` cannot run on `backend` here, or null. Under CI a missing service throws. */
  async skipReason(backend: BackendName, scenario: Scenario): Promise<string | null> {
    const missing = await unavailable(backend);
    if (missing) {
      if (process.env.CI === 'true') throw new Error(`${backend}: ${missing}`);
      return missing;
    }
    return (await scenario.skip?.(await this.env(backend))) ?? null;
  }

  async run(backend: BackendName, scenario: Scenario, o: RunOptions): Promise<ScenarioResult> {
    const base: ScenarioResult = {
      backend,
      scenario: scenario.name,
      overlaps: scenario.overlaps,
      status: 'skip',
      errors: [],
      durationMs: 0,
      seed: o.seed,
      files: [],
      ...(scenario.known ? { known: scenario.known } : {}),
    };
    const skipped = await this.skipReason(backend, scenario);
    if (skipped) return { ...base, skipped };
    const env = await this.env(backend);

    const id = randomBytes(4).toString('hex');
    const prefix = `lhf-${id}`;
    const key = `faults:${scenario.name}`;
    const resourceSpec = env.resource(`lhf:${id}:${scenario.name}`);
    const admin = await openResource(resourceSpec);
    await admin.reset();
    await env.heal();

    const history: Ev[] = [];
    const errors: string[] = [];
    const t0 = clock();
    const rel = (t: number) => t - t0;
    const members = new Map<number, Member>();
    const phase = new Map<number, 'idle' | 'holding' | 'gap'>();
    const gapWaiters: ((m: Member) => void)[] = [];
    const replacements: Promise<void>[] = [];
    let nextP = 0;
    const r = rng(o.seed);
    const config = (p: number): WorkerConfig => ({
      backend,
      endpoints: env.endpoints,
      resource: resourceSpec,
      key,
      prefix,
      ttlMs: o.ttlMs,
      waitMs: 20_000,
      gapMs: [20, 60],
      longGapMs: [Math.round(o.ttlMs * 0.4), Math.round(o.ttlMs * 2)],
      longGapP: scenario.longGaps ?? 0.06,
      thinkMs: [0, 20],
      // longer than a lease: a reply held back past the lease's end still reaches the library
      opTimeoutMs: o.ttlMs * 2,
      seed: (o.seed * 7919 + p * 104729) >>> 0,
      ...(o.broken ? { broken: o.broken } : {}),
    });
    const onMessage = (m: FromWorker) => {
      if (m.kind === 'fatal') errors.push(`p${m.p}: ${m.error}`);
      if (m.kind !== 'ev') return;
      const e = m.ev;
      e.t = rel(e.t);
      if (e.value && typeof e.value.deadline === 'number') e.value.deadline = rel(e.value.deadline);
      history.push(e);
      if (e.f === 'acquire' && e.type === 'ok') phase.set(e.p, 'holding');
      else if (e.f === 'read' && e.type === 'ok') {
        phase.set(e.p, 'gap');
        const member = members.get(e.p);
        if (member) gapWaiters.shift()?.(member);
      } else if (e.f === 'write' && e.type === 'invoke') phase.set(e.p, 'holding');
      else if (e.f === 'release' && e.type === 'invoke') phase.set(e.p, 'idle');
    };
    const start = (w: WorkerProc) => {
      const p = nextP++;
      w.onMessage = onMessage;
      members.set(p, { p, w });
      phase.set(p, 'idle');
      w.run(p, config(p));
    };
    const record = (f: string, value?: Record<string, unknown>) => {
      const e: Ev = { t: rel(clock()), p: -1, type: 'info', f };
      if (value) e.value = value;
      history.push(e);
    };

    const ends = performance.now() + o.durationMs;
    const stopped = new AbortController();
    const timer = setTimeout(() => stopped.abort(), o.durationMs);
    const ctx: Ctx = {
      env,
      rnd: r,
      ttlMs: o.ttlMs,
      fullKey: `${prefix}:${key}`,
      get live() {
        return performance.now() < ends;
      },
      sleep: async (ms) => {
        await sleep(Math.min(ms, Math.max(0, ends - performance.now())), stopped.signal);
        return performance.now() < ends;
      },
      record,
      waitGap: (timeoutMs) =>
        new Promise((resolve) => {
          const done = (m: Member | null) => {
            clearTimeout(t);
            const i = gapWaiters.indexOf(done);
            if (i >= 0) gapWaiters.splice(i, 1);
            resolve(m);
          };
          const t = setTimeout(() => done(null), Math.min(timeoutMs, Math.max(0, ends - performance.now())));
          gapWaiters.push(done);
        }),
      holders: () => [...members.values()].filter((m) => phase.get(m.p) !== 'idle' && !m.w.paused && !m.w.dead),
      pause: async (m, ms) => {
        record('pause-process', { target: m.p, ms: Math.round(ms), fault: true });
        m.w.stop();
        await sleep(ms);
        m.w.cont();
        record('resume-process', { target: m.p });
      },
      kill: (m) => {
        if (m.w.dead) return;
        m.w.kill();
        history.push({ t: rel(clock()), p: m.p, type: 'info', f: 'crash' });
        record('kill-process', { target: m.p, fault: true });
        members.delete(m.p);
        // a replacement that cannot start (a fork that never got ready) is this run's error, never
        // an unhandled rejection while the scenario goes on
        replacements.push(
          this.pool.take().then(start, (e: unknown) => void errors.push(`replacement for p${m.p}: ${String(e)}`)),
        );
        this.pool.warm(1);
      },
    };

    this.log(`${backend}/${scenario.name}: ${o.workers} workers, ${o.durationMs}ms, ttl ${o.ttlMs}ms, seed ${o.seed}`);
    // what the servers do on their own (a Sentinel's failover) goes into the history as well
    const unwatch = await env
      .watch?.(record, () => rel(clock()))
      .catch((e: Error) => {
        errors.push(`watch: ${e.message}`);
        return undefined;
      });
    try {
      for (let i = 0; i < o.workers; i++) start(await this.pool.take());
      if (scenario.kills) this.pool.warm(1); // a spare, so a killed worker's replacement starts at once
      await scenario.run(ctx);
    } catch (e) {
      errors.push(`nemesis: ${(e as Error).stack ?? String(e)}`);
    } finally {
      clearTimeout(timer);
      stopped.abort();
    }
    // heal, settle, halt
    await env.heal().catch((e: Error) => errors.push(`heal: ${e.message}`));
    for (const m of members.values()) {
      if (m.w.paused) {
        m.w.cont();
        record('resume-process', { target: m.p });
      }
    }
    record('healed');
    const healedAt = rel(clock());
    await Promise.allSettled(replacements);
    await sleep(o.settleMs ?? o.ttlMs);
    // and until the healed system has made progress — a write accepted since the heal — within
    // SETTLE_MAX_MS: a dead holder's lock may outlive a short schedule (etcd's 2 s lease, a
    // ZooKeeper session), and reconnecting after a blackhole can take longer than a ttl on a busy
    // machine; a run that halted first would have nothing after its faults to check
    const progressed = () => history.some((e) => e.f === 'write' && e.type === 'ok' && e.t >= healedAt);
    const settleEnd = performance.now() + SETTLE_MAX_MS;
    while (!progressed() && performance.now() < settleEnd) await sleep(20);
    const halting = [...members.values()].map(async (m) => {
      if (!(await m.w.halt(10_000))) {
        errors.push(`p${m.p} did not halt within 10s: killed`);
        m.w.kill();
        history.push({ t: rel(clock()), p: m.p, type: 'info', f: 'crash' });
      }
      this.pool.give(m.w);
    });
    await Promise.all(halting);
    await unwatch?.();
    const endT = rel(clock());
    history.sort((a, b) => a.t - b.t);
    let verdict: Verdict | undefined;
    try {
      const log = await admin.log();
      const value = await admin.value();
      verdict = check(history, log, value, {
        ttlMs: o.ttlMs,
        overlaps: scenario.overlaps,
        endT,
        ...(o.slackMs !== undefined ? { slackMs: o.slackMs } : {}),
      });
      if (o.outDir) {
        mkdirSync(o.outDir, { recursive: true });
        const stem = join(o.outDir, `${backend}-${scenario.name}${o.broken ? `-broken-${o.broken}` : ''}`);
        writeFileSync(`${stem}.svg`, timeline(`${backend} / ${scenario.name}`, history, verdict, endT, log));
        writeFileSync(
          `${stem}.json`,
          JSON.stringify({
            backend,
            scenario: scenario.name,
            seed: o.seed,
            ttlMs: o.ttlMs,
            verdict: { ...verdict, holds: undefined },
            history,
            log,
          }),
        );
        base.files.push(`${stem}.svg`, `${stem}.json`);
      }
    } catch (e) {
      errors.push(`check: ${(e as Error).stack ?? String(e)}`);
    } finally {
      await admin.drop().catch(() => {});
      await admin.close();
    }
    const ok = verdict?.ok === true && errors.length === 0;
    // a documented limitation passes when it is caught (or did not come up in this run)
    const status: ScenarioResult['status'] =
      scenario.known && verdict && !verdict.ok && errors.length === 0 ? 'known-unsafe' : ok ? 'pass' : 'fail';
    return { ...base, status, ...(verdict ? { verdict } : {}), errors, durationMs: Math.round(endT) };
  }
}
