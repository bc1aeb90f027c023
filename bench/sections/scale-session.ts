/**
 * 4b. The session comparison of issue #17 ("100,000 leases cost no more than 10,000"): four
 * children, leasehold-session with n and 10 × n leases and each one's control (held, not renewed),
 * each on its own redis-server, hold their leases through `rounds` rounds; in each round all four
 * measure one window at the same time. The goal (bench/report/goals.ts, P6) is decided from the
 * rounds paired: per round, (10n row − its control) − (n row − its control).
 */
import type { ChildProcess } from 'node:child_process';
import { freePort } from '../../test/support/ports.js';
import type { Ctx } from '../lib/ctx.js';
import { forkTs, onCleanup, RedisServer, stopChild } from '../lib/procs.js';
import { errText } from '../lib/stats.js';
import type { ScaleResult, ScaleSpec, ScaleWindow } from '../scale-child.js';

/** How the session rows were measured (ScaleSection.session); absent in runs before 2026-12-05. */
export interface SessionRounds {
  rounds: number;
  /** each round's window, ms */
  windowMs: number;
  /** a window for all four before round 1, not counted (0: none) */
  warmupMs: number;
  /** the four children's windows of a round were measured at the same time */
  simultaneous: true;
}

type Reply =
  { ok: true; result: ScaleResult } | { ok: false; error: string } | { ready: true } | { window: ScaleWindow };

/** Sends `msg` and waits for the child's next reply (each message gets exactly one). */
function ask<T extends Reply>(child: ChildProcess, what: string, msg: unknown, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const done = (e: Error | null, m?: Reply) => {
      clearTimeout(t);
      child.off('message', onMessage);
      child.off('exit', onExit);
      if (e) reject(e);
      else resolve(m as T);
    };
    const onMessage = (m: Reply) => ('ok' in m && !m.ok ? done(new Error(`${what}: ${m.error}`)) : done(null, m));
    const onExit = (code: number | null) => done(new Error(`${what} exited with ${code}`));
    const t = setTimeout(() => done(new Error(`${what} timed out after ${timeoutMs}ms`)), timeoutMs);
    child.on('message', onMessage);
    child.once('exit', onExit);
    child.send(msg as object, () => {}); // a child already gone reports through 'exit'
  });
}

export async function sessionRounds(
  ctx: Ctx,
  o: { n: number; ttlMs: number; windowMs: number; rounds: number; warmupMs: number; childPath: string },
): Promise<{ results: ScaleResult[]; failures: { lib: string; error: string }[] }> {
  const rows = [o.n, 10 * o.n].flatMap((n) => [false, true].map((control) => ({ n, control })));
  const name = (r: { n: number; control: boolean }) => `leasehold-session (${r.n}${r.control ? ', control' : ''})`;
  ctx.log(
    `leasehold-session: ${o.n} and ${10 * o.n} leases, each with its control (held, not renewed), ttl ${o.ttlMs}ms, ` +
      `${o.rounds} rounds of ${o.windowMs}ms, the four measured at once`,
  );
  const servers: RedisServer[] = [];
  const children: ChildProcess[] = [];
  try {
    for (let i = 0; i < rows.length; i++) {
      const s = new RedisServer(await freePort()); // one server each: its CPU is that row's alone
      servers.push(s);
      onCleanup(() => s.stop());
      await s.start();
    }
    // --no-memory-reducer as every scale child (scale.ts, runChild); forked at once, acquiring one
    // after the other (an acquisition burst is not what is measured, and would load the others)
    for (let i = 0; i < rows.length; i++)
      children.push(forkTs(o.childPath, [], ['--expose-gc', '--no-memory-reducer']));
    for (const [i, r] of rows.entries()) {
      ctx.signal.throwIfAborted();
      const spec: ScaleSpec = {
        lib: 'leasehold-session',
        n: r.n,
        windowMs: o.windowMs,
        ttlMs: o.ttlMs,
        port: servers[i]!.port,
        control: r.control,
        rounds: o.rounds,
      };
      await ask(children[i]!, name(r), spec, 120_000);
    }
    // round 0, not counted: the children acquired one after the other, so the first to acquire has
    // renewed for seconds longer than the last; a warm-up window for all four first (its figures are
    // logged, to see whether a first window differs)
    for (let k = o.warmupMs > 0 ? 0 : 1; k <= o.rounds; k++) {
      ctx.signal.throwIfAborted();
      const msg = k === 0 ? { window: o.warmupMs, warmup: true } : { window: o.windowMs };
      const ws = await Promise.all(
        children.map((c, i) => ask<{ window: ScaleWindow }>(c, name(rows[i]!), msg, msg.window + 30_000)),
      );
      ctx.log(
        `  ${k === 0 ? 'warm-up (not counted)' : `round ${k}`}: client CPU ${ws.map((w) => w.window.clientCpuPct).join(' / ')} %, ` +
          `Redis CPU ${ws.map((w) => w.window.redisCpuPct).join(' / ')} % (${rows.map(name).join(', ')})`,
      );
    }
    const done = await Promise.all(
      children.map((c, i) => ask<{ ok: true; result: ScaleResult }>(c, name(rows[i]!), { finish: true }, 180_000)),
    );
    const results = done.map((d) => d.result);
    for (const r of results) {
      ctx.log(
        `  ${name({ n: r.n, control: !!r.control })}: median client CPU ${r.clientCpuPct}% (user ${r.userCpuPct}, ` +
          `system ${r.sysCpuPct}), Redis CPU ${r.redisCpuPct}%, ${r.roundTripsPerTick} round trips/tick, ` +
          `heap ${r.heapHeldMB} MB, lost ${r.lost}`,
      );
    }
    return { results, failures: [] };
  } catch (e) {
    ctx.signal.throwIfAborted(); // past the section's budget: the section's own error
    ctx.log(`  failed: ${errText(e)}`);
    return { results: [], failures: [{ lib: 'leasehold-session (rounds)', error: errText(e) }] };
  } finally {
    await Promise.all(children.map((c) => stopChild(c)));
    await Promise.all(servers.map((s) => s.stop()));
  }
}
