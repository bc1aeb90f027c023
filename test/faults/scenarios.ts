/**
 * The scenarios: one nemesis each, on a schedule drawn from the seed. `overlaps: 'forbidden'`
 * marks the schedules without pauses or delays (holds must never overlap there); the others
 * pause or delay someone, so holders outlive their leases and overlaps are expected — fencing
 * must then reject every stale write, and the validity and signalling checks still apply.
 */
import type { Ctx, Member } from './harness.js';
import type { Env } from './envs.js';
import type { ProxyMode } from './proxy.js';
import { faketimeWorks } from './servers.js';
import type { BackendName } from './types.js';

export interface Scenario {
  name: string;
  backends: readonly BackendName[];
  overlaps: 'forbidden' | 'expected';
  about: string;
  /** A documented limitation: the checker is expected to find violations (reported, not failed). */
  known?: string;
  /** Kills workers (a spare process is kept ready). */
  kills?: boolean;
  /** Runs only when the full (torture) schedule is asked for. */
  tortureOnly?: boolean;
  /**
   * Share of holds with a long gap (0.4–2 × ttl, so they need renewals) instead of 20–60 ms.
   * Higher for faults of servers and the network, so that leases are held across them.
   */
  longGaps?: number;
  skip?(env: Env): Promise<string | null>;
  run(ctx: Ctx): Promise<void>;
}

const ALL: readonly BackendName[] = ['redis', 'redlock', 'postgres'];
const between = (ctx: Ctx, lo: number, hi: number) => ctx.rnd.int(Math.round(lo), Math.round(hi));

/** Picks k distinct indexes of n. */
function some(ctx: Ctx, n: number, k: number): number[] {
  const xs = Array.from({ length: n }, (_, i) => i);
  for (let i = xs.length - 1; i > 0; i--) {
    const j = ctx.rnd.int(0, i);
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs.slice(0, k).sort();
}

/** Sets proxies `which` to `mode` for `ms`, then back to pass. */
async function proxyWindow(ctx: Ctx, which: number[], mode: ProxyMode, ms: number): Promise<void> {
  const ports = which.map((i) => ctx.env.servers[i]?.port ?? ctx.env.proxies[i]!.targetPort);
  ctx.record(`proxy-${mode.kind}`, {
    nodes: ports,
    ms,
    ...(mode.kind === 'delay' ? { delay: mode.ms } : {}),
    fault: true,
  });
  for (const i of which) ctx.env.proxies[i]!.setMode(mode);
  await new Promise((r) => setTimeout(r, ms));
  for (const i of which) ctx.env.proxies[i]!.setMode({ kind: 'pass' });
  // ending a blackhole resets the connections: on a session backend that ends the holder's session
  const ends = mode.kind === 'blackhole' && sessions(ctx);
  ctx.record(`proxy-pass`, { nodes: ports, ...(ends ? { losesLocks: true } : {}) });
}

/** A session backend (Postgres) loses a holder's lock with its connection. */
const sessions = (ctx: Ctx) => ctx.env.backend === 'postgres';

const nodesOf = (ctx: Ctx) => ctx.env.proxies.length;
const majority = (n: number) => Math.floor(n / 2) + 1;

export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'baseline',
    backends: ALL,
    overlaps: 'forbidden',
    about: 'no faults: contention only',
    async run(ctx) {
      while (await ctx.sleep(1000));
    },
  },
  {
    name: 'pause-holder',
    backends: ALL,
    overlaps: 'expected',
    about: 'SIGSTOP a holder in its read→write gap for 1.3–2.2 × ttl, then SIGCONT',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, 50, 300))) {
        const m = await ctx.waitGap(ctx.ttlMs);
        if (m) await ctx.pause(m, between(ctx, ctx.ttlMs * 1.3, ctx.ttlMs * 2.2));
      }
    },
  },
  {
    name: 'kill-holder',
    backends: ALL,
    overlaps: 'forbidden',
    kills: true,
    about: 'SIGKILL a holder in its read→write gap; a new process takes its place',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 1.5))) {
        const m = await ctx.waitGap(ctx.ttlMs);
        if (m) ctx.kill(m);
      }
    },
  },
  {
    name: 'server-stop',
    longGaps: 0.25,
    backends: ['redis'],
    overlaps: 'expected',
    about: 'SIGSTOP the Redis server for 0.3–2 × ttl, then SIGCONT (holders cannot renew)',
    async run(ctx) {
      const s = ctx.env.servers[0]!;
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs))) {
        const ms = between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs * 2);
        ctx.record('server-stop', { port: s.port, ms, fault: true });
        s.stop();
        await new Promise((r) => setTimeout(r, ms));
        s.cont();
        ctx.record('server-cont', { port: s.port });
      }
    },
  },
  {
    name: 'server-kill',
    longGaps: 0.25,
    backends: ['redis'],
    overlaps: 'expected',
    about: 'SIGKILL the Redis server (AOF, fsync always) and restart it after 0.1–2 × ttl',
    async run(ctx) {
      const s = ctx.env.servers[0]!;
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 1.5))) {
        const ms = between(ctx, ctx.ttlMs * 0.1, ctx.ttlMs * 2);
        ctx.record('server-kill', { port: s.port, ms, fault: true });
        await s.kill();
        await new Promise((r) => setTimeout(r, ms));
        await s.start();
        ctx.record('server-up', { port: s.port });
      }
    },
  },
  {
    name: 'server-restart-empty',
    backends: ['redis'],
    overlaps: 'expected',
    tortureOnly: true,
    known:
      'a Redis restarted without its data loses the locks and the fence counter: fences restart at 1 and ' +
      'are granted twice (fence-unique, fence-order); the resource rejects the new holders until the ' +
      'counter climbs past the highest fence it has seen, so no update is lost',
    about: 'SIGKILL the Redis server and restart it empty (no persistence), once',
    async run(ctx) {
      const s = ctx.env.servers[0]!;
      if (!(await ctx.sleep(ctx.ttlMs * 2))) return;
      ctx.record('server-kill', { port: s.port, fault: true });
      await s.kill();
      s.wipe();
      await s.start();
      ctx.record('server-up-empty', { port: s.port, losesLocks: true });
      while (await ctx.sleep(1000));
    },
  },
  {
    name: 'minority-kill',
    longGaps: 0.25,
    backends: ['redlock'],
    overlaps: 'forbidden',
    about:
      'SIGKILL 2 of 5 nodes; after ttl+ restart them empty, re-seed their fence counters (reseedFences) ' +
      'behind a closed proxy, then let clients back in',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs))) {
        const which = some(ctx, nodesOf(ctx), nodesOf(ctx) - majority(nodesOf(ctx)));
        const ports = which.map((i) => ctx.env.servers[i]!.port);
        ctx.record('nodes-kill', { nodes: ports, fault: true });
        for (const i of which) ctx.env.proxies[i]!.setMode({ kind: 'blackhole' });
        await Promise.all(which.map((i) => ctx.env.servers[i]!.kill()));
        await new Promise((r) => setTimeout(r, between(ctx, ctx.ttlMs * 1.1, ctx.ttlMs * 2)));
        for (const i of which) {
          ctx.env.servers[i]!.wipe();
          await ctx.env.servers[i]!.start();
          await ctx.env.reseed!(i);
        }
        for (const i of which) ctx.env.proxies[i]!.setMode({ kind: 'pass' });
        ctx.record('nodes-up', { nodes: ports });
      }
    },
  },
  {
    name: 'minority-stop',
    longGaps: 0.25,
    backends: ['redlock'],
    overlaps: 'expected',
    about: 'SIGSTOP 2 of 5 nodes for 0.5–2.5 × ttl, then SIGCONT',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs))) {
        const which = some(ctx, nodesOf(ctx), nodesOf(ctx) - majority(nodesOf(ctx)));
        const ms = between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 2.5);
        const ports = which.map((i) => ctx.env.servers[i]!.port);
        ctx.record('nodes-stop', { nodes: ports, ms, fault: true });
        for (const i of which) ctx.env.servers[i]!.stop();
        await new Promise((r) => setTimeout(r, ms));
        for (const i of which) ctx.env.servers[i]!.cont();
        ctx.record('nodes-cont', { nodes: ports });
      }
    },
  },
  {
    name: 'majority-stop',
    longGaps: 0.25,
    backends: ['redlock'],
    overlaps: 'expected',
    about: 'SIGSTOP 3 of 5 nodes for 0.5–2 × ttl, then SIGCONT (no quorum meanwhile)',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 1.5))) {
        const which = some(ctx, nodesOf(ctx), majority(nodesOf(ctx)));
        const ms = between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 2);
        const ports = which.map((i) => ctx.env.servers[i]!.port);
        ctx.record('nodes-stop', { nodes: ports, ms, fault: true });
        for (const i of which) ctx.env.servers[i]!.stop();
        await new Promise((r) => setTimeout(r, ms));
        for (const i of which) ctx.env.servers[i]!.cont();
        ctx.record('nodes-cont', { nodes: ports });
      }
    },
  },
  {
    name: 'clock-jump',
    longGaps: 0.25,
    backends: ['redlock'],
    overlaps: 'expected',
    about: "jump one node's clock forward by 2 × ttl (libfaketime), its keys expire early",
    async skip(env) {
      const f = await faketimeWorks();
      if (!f.ok) return f.reason;
      return env.servers[0]?.options.faketime ? null : 'node 0 was not started under libfaketime';
    },
    async run(ctx) {
      const s = ctx.env.servers[0]!;
      let offset = 0;
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 1.5))) {
        offset += Math.ceil((ctx.ttlMs * 2) / 1000);
        s.setClock(`+${offset}s`);
        ctx.record('clock-jump', { port: s.port, offset: `+${offset}s`, fault: true });
      }
    },
  },
  {
    name: 'terminate-holder',
    backends: ['postgres'],
    overlaps: 'forbidden',
    about: 'pg_terminate_backend on the session holding the lock (the server frees it at once)',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs))) {
        const m = await ctx.waitGap(ctx.ttlMs);
        if (!m) continue;
        const targets = await ctx.env.terminateHolders!(ctx.fullKey);
        ctx.record('terminate-backend', { targets, losesLocks: true, fault: targets.length > 0 });
      }
    },
  },
  {
    name: 'proxy-delay',
    longGaps: 0.25,
    backends: ALL,
    overlaps: 'expected',
    about: 'the proxy delays every packet both ways by 0.05–0.4 × ttl, in windows of 1–2 × ttl',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.2, ctx.ttlMs))) {
        const n = nodesOf(ctx);
        const which = n === 1 ? [0] : some(ctx, n, ctx.rnd.int(1, n));
        const mode: ProxyMode = { kind: 'delay', ms: between(ctx, ctx.ttlMs * 0.05, ctx.ttlMs * 0.4) };
        await proxyWindow(ctx, which, mode, between(ctx, ctx.ttlMs, ctx.ttlMs * 2));
      }
    },
  },
  {
    name: 'proxy-hold',
    longGaps: 0.25,
    backends: ALL,
    overlaps: 'expected',
    about: 'the proxy holds replies (requests still arrive) for 0.5–2 × ttl, then releases them late',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.2, ctx.ttlMs))) {
        const n = nodesOf(ctx);
        const which = n === 1 ? [0] : some(ctx, n, majority(n));
        await proxyWindow(ctx, which, { kind: 'hold' }, between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 2));
      }
    },
  },
  {
    name: 'proxy-blackhole',
    longGaps: 0.25,
    backends: ALL,
    overlaps: 'expected',
    about: 'the proxy drops all traffic for 0.5–2 × ttl, then resets the connections',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs))) {
        const n = nodesOf(ctx);
        const which = n === 1 ? [0] : some(ctx, n, ctx.rnd.int(1, majority(n)));
        await proxyWindow(ctx, which, { kind: 'blackhole' }, between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 2));
      }
    },
  },
  {
    name: 'proxy-reset',
    longGaps: 0.25,
    backends: ALL,
    overlaps: 'forbidden',
    about: 'the proxy resets (RST) every connection, every 0.1–0.5 × ttl',
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.1, ctx.ttlMs * 0.5))) {
        const n = nodesOf(ctx);
        const which = n === 1 ? [0] : some(ctx, n, ctx.rnd.int(1, n));
        const nodes = which.map((i) => ctx.env.proxies[i]!.targetPort);
        ctx.record('proxy-reset', { nodes, fault: true, ...(sessions(ctx) ? { losesLocks: true } : {}) });
        for (const i of which) ctx.env.proxies[i]!.reset();
      }
    },
  },
];

export function scenariosFor(backend: BackendName, opts: { torture?: boolean; only?: string[] } = {}): Scenario[] {
  return SCENARIOS.filter(
    (s) => s.backends.includes(backend) && (opts.only ? opts.only.includes(s.name) : opts.torture || !s.tortureOnly),
  );
}

export type { Member };
