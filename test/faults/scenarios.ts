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
  /**
   * The fault must not make a call fail with an error: no renewal or release throws, and an
   * acquire fails only when the run stops it (test/faults/faults.test.ts reads the timeline). A
   * lease may still run out while its renewal waits (signalled, fenced: the checker's part).
   */
  callsSucceed?: boolean;
  skip?(env: Env): Promise<string | null>;
  run(ctx: Ctx): Promise<void>;
}

/** The backends with a server behind a proxy (network faults). */
const ALL: readonly BackendName[] = ['redis', 'redlock', 'postgres', 'zookeeper', 'etcd'];
/** Process faults only: also the embedded SQLite backend (one host, no server, no network). */
const PROCESS: readonly BackendName[] = [...ALL, 'sqlite', 'cluster'];
/** An owned quorum of 3 members behind a proxy each (Env.members). */
const QUORUM: readonly BackendName[] = ['etcd', 'zookeeper'];
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
    backends: PROCESS,
    overlaps: 'forbidden',
    about: 'no faults: contention only',
    async run(ctx) {
      while (await ctx.sleep(1000));
    },
  },
  {
    name: 'pause-holder',
    backends: PROCESS,
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
    backends: PROCESS,
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
    backends: ['redis', 'zookeeper'],
    overlaps: 'expected',
    about:
      'SIGSTOP the lock server (ZooKeeper: every member of the ensemble) for 0.3–2 × ttl, then SIGCONT (holders cannot renew)',
    async run(ctx) {
      const all = ctx.env.servers;
      const ports = all.map((s) => s.port);
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs))) {
        const ms = between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs * 2);
        ctx.record('server-stop', { nodes: ports, ms, fault: true });
        for (const s of all) s.stop();
        await new Promise((r) => setTimeout(r, ms));
        for (const s of all) s.cont();
        ctx.record('server-cont', { nodes: ports });
      }
    },
  },
  {
    name: 'server-kill',
    longGaps: 0.25,
    backends: ['redis', 'zookeeper'],
    overlaps: 'expected',
    about:
      'SIGKILL the lock server (Redis: AOF, fsync always; ZooKeeper: every member, each keeping its transaction log) ' +
      'and restart it after 0.1–2 × ttl',
    async run(ctx) {
      const all = ctx.env.servers;
      const ports = all.map((s) => s.port);
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 1.5))) {
        const ms = between(ctx, ctx.ttlMs * 0.1, ctx.ttlMs * 2);
        ctx.record('server-kill', { nodes: ports, ms, fault: true });
        await Promise.all(all.map((s) => s.kill()));
        await new Promise((r) => setTimeout(r, ms));
        // an ensemble's members wait for each other (a quorum) before they serve: all at once
        await Promise.all(all.map((s) => s.start()));
        ctx.record('server-up', { nodes: ports });
      }
    },
  },
  {
    name: 'server-restart-empty',
    backends: ['redis'],
    overlaps: 'expected',
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
    name: 'minority-restart-empty',
    longGaps: 0.25,
    backends: ['redlock'],
    overlaps: 'expected',
    about:
      'SIGKILL 2 of 5 nodes and restart them empty at once, without the delay or the re-seed (outside ' +
      "Redlock's restart rule): a lock can be granted twice, but fences stay unique and ordered (counters seeded from TIME)",
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs))) {
        const which = some(ctx, nodesOf(ctx), nodesOf(ctx) - majority(nodesOf(ctx)));
        const ports = which.map((i) => ctx.env.servers[i]!.port);
        ctx.record('nodes-kill', { nodes: ports, fault: true });
        await Promise.all(which.map((i) => ctx.env.servers[i]!.kill()));
        for (const i of which) {
          ctx.env.servers[i]!.wipe();
          await ctx.env.servers[i]!.start();
        }
        // a lease held on a bare majority that included them is now on a minority: it may be granted again
        ctx.record('nodes-up-empty', { nodes: ports, mayBreakLocks: true });
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
        s.setClock!(`+${offset}s`);
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
        // recorded, against the holders it targets, before the terminate is sent: the server frees
        // the lock (and the next process in its queue holds it) before the statement answers
        await ctx.env.terminateHolders!(ctx.fullKey, (targets) =>
          ctx.record('terminate-backend', { targets, losesLocks: true, fault: targets.length > 0 }),
        );
      }
    },
  },
  {
    name: 'member-kill',
    longGaps: 0.25,
    backends: QUORUM,
    overlaps: 'forbidden',
    about:
      'SIGKILL one of the 3 members (etcd, ZooKeeper; the leader, or the one a client talks to) and restart it ' +
      'with its data after 0.5–3 × ttl',
    async run(ctx) {
      const m = ctx.env.members!;
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 1.5))) {
        const i = ctx.rnd.int(0, m.count - 1);
        const port = m.port(i);
        ctx.record('member-kill', { port, fault: true });
        await m.kill(i);
        await new Promise((r) => setTimeout(r, between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 3)));
        await m.restart(i);
        ctx.record('member-up', { port });
      }
    },
  },
  {
    name: 'member-stop',
    longGaps: 0.25,
    backends: QUORUM,
    overlaps: 'forbidden',
    about:
      'SIGSTOP one of the 3 members (etcd, ZooKeeper) for 0.5–3 × ttl, then SIGCONT (a frozen leader: the others elect anew)',
    async run(ctx) {
      const m = ctx.env.members!;
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 1.5))) {
        const i = ctx.rnd.int(0, m.count - 1);
        const port = m.port(i);
        const ms = between(ctx, ctx.ttlMs * 0.5, ctx.ttlMs * 3);
        ctx.record('member-stop', { port, ms, fault: true });
        m.stop(i);
        await new Promise((r) => setTimeout(r, ms));
        m.cont(i);
        ctx.record('member-cont', { port });
      }
    },
  },
  {
    name: 'lease-revoke',
    backends: ['etcd'],
    overlaps: 'forbidden',
    about: "an outsider revokes the holder's etcd lease (etcdctl lease revoke): its keys go at once",
    async run(ctx) {
      while (await ctx.sleep(between(ctx, ctx.ttlMs * 0.3, ctx.ttlMs))) {
        const m = await ctx.waitGap(ctx.ttlMs);
        if (!m) continue;
        // recorded before the revoke is sent: the next holder may be granted before it returns
        await ctx.env.revokeHolder!(ctx.fullKey, () => ctx.record('lease-revoke', { losesLocks: true, fault: true }));
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
  {
    name: 'failovers',
    longGaps: 0.25,
    backends: ['sentinel', 'cluster'],
    overlaps: 'expected',
    about:
      "SIGKILL the master (Sentinel: the master; Cluster: the master serving the lock key's slot) while a " +
      'holder is in its gap, wait for the promotion, bring the node back as a replica; twice (four times with ' +
      'a ttl of 1 s or more), whatever the run time',
    async run(ctx) {
      const { clusterFailover, failover } = await import('../support/failover.js');
      const rounds = ctx.ttlMs >= 1000 ? 4 : 2; // CI's ttl is 500 ms
      for (let i = 0; i < rounds; i++) {
        await new Promise((r) => setTimeout(r, between(ctx, ctx.ttlMs, ctx.ttlMs * 3)));
        await ctx.waitGap(ctx.ttlMs * 2); // someone holds the lock (or nobody for a while: kill anyway)
        // asynchronous replication: a grant not yet on the replica is lost with the master
        ctx.record('master-kill', { fault: true, mayBreakLocks: true });
        const { from, to } =
          ctx.env.backend === 'cluster' ? await clusterFailover(`{${ctx.fullKey}}`) : await failover();
        ctx.record('promoted', { from, to });
        await ctx.env.heal();
        ctx.record('replica-back', { port: from });
      }
    },
  },
  {
    name: 'reshard',
    longGaps: 0.25,
    backends: ['cluster'],
    overlaps: 'forbidden',
    callsSucceed: true,
    about:
      "move the lock key's slot to another master by hand, as redis-cli --cluster reshard does (IMPORTING and " +
      'MIGRATING, 20-300 ms (at most a quarter of the ttl) with no key moved yet, MIGRATE of its keys, SETSLOT NODE), again and again while the ' +
      'contenders acquire, renew and release: the calls on the slot wait out each move, nothing is granted twice',
    async run(ctx) {
      const { ClusterClients, ownerOf, slotMover } = await import('../support/cluster.js');
      const { slotOf } = await import('../../src/backends/redis/slots.js');
      const clients = new ClusterClients();
      const admin = await clients.make('ioredis');
      const slot = slotOf(`{${ctx.fullKey}}`);
      const home = await ownerOf(admin, slot);
      try {
        while (await ctx.sleep(between(ctx, ctx.ttlMs / 4, ctx.ttlMs))) {
          const move = await slotMover(admin, slot);
          ctx.record('reshard-start', { fault: true, slot });
          await move.half();
          // a move is always finished, even when the scenario's time is up meanwhile
          await new Promise((r) => setTimeout(r, between(ctx, 20, Math.min(300, ctx.ttlMs / 4))));
          await move.start();
          await move.finish();
          ctx.record('reshard-done', { slot });
        }
      } finally {
        // the slot goes back where it was: later files find the Cluster as the services made it
        try {
          if ((await ownerOf(admin, slot)) !== home) {
            const move = await slotMover(admin, slot, home);
            await move.start();
            await move.finish();
          }
        } finally {
          await clients.closeAll();
        }
      }
    },
  },
  {
    name: 'master-pause',
    backends: ['sentinel'],
    overlaps: 'expected',
    about:
      'SIGSTOP the master (a stall: swap, a slow fork) while a holder is in its gap, until the Sentinels have ' +
      'promoted its replica, then SIGCONT: the old master comes back with its locks and its clients, two masters ' +
      'take writes until a Sentinel turns the old one into a replica (dropping its data and its clients). The ' +
      'harness records only the pause; the failover and the conversion come from watching the Sentinels',
    async run(ctx) {
      const { pauseMaster } = await import('../support/failover.js');
      await new Promise((r) => setTimeout(r, between(ctx, ctx.ttlMs, ctx.ttlMs * 3)));
      await ctx.waitGap(ctx.ttlMs * 2);
      // not a fault that breaks locks by itself: a paused master keeps them
      ctx.record('master-stop', { fault: true });
      const { from, to } = await pauseMaster();
      ctx.record('master-cont', { port: from, promoted: to });
      await ctx.env.heal(); // until the old master is a replica, in sync, and every Sentinel agrees
    },
  },
];

export function scenariosFor(backend: BackendName, opts: { torture?: boolean; only?: string[] } = {}): Scenario[] {
  return SCENARIOS.filter(
    (s) => s.backends.includes(backend) && (opts.only ? opts.only.includes(s.name) : opts.torture || !s.tortureOnly),
  );
}

export type { Member };
