/**
 * `leasehold elect <name> -- <command…>`: campaign; while leader, run the command (with
 * LEASEHOLD_KEY, LEASEHOLD_FENCE, LEASEHOLD_TOKEN and LEASEHOLD_LEADER); on demotion stop it and
 * campaign again. When the command ends by itself, resign and exit with its code.
 */
import { LeaseLostError } from '../index.js';
import { checkTaggedKey } from '../validate.js';
import { sleep } from '../wait.js';
import {
  CliError,
  defaultHolder,
  duration,
  EXIT,
  openLocks,
  closeLocks,
  say,
  sayWarnings,
  toCliError,
  type BackendFlags,
} from './common.js';
import { leaseEnv, outcome, start } from './run.js';
import { exitCodeOf, onJobControl, onStopSignals, type Supervised } from './supervise.js';

export interface ElectFlags extends BackendFlags {
  ttl: string;
  grace: string;
  value?: string;
}

export async function elect(name: string, command: string[], flags: ElectFlags): Promise<number> {
  checkTaggedKey(name, 'election:', 'election name');
  const ttlMs = duration(flags.ttl, '--ttl');
  const graceMs = duration(flags.grace, '--grace', true);
  const value = flags.value ?? defaultHolder();
  sayWarnings();
  const { locks, backend } = await openLocks(flags, ttlMs);
  if (!backend.capabilities.value) {
    await locks.close().catch(() => {});
    throw new CliError(
      `the ${backend.name} backend cannot hold an election (it stores no holder value)`,
      EXIT.UNAVAILABLE,
    );
  }
  const election = locks.elect(name, { value });
  const stopping = new AbortController();
  let child: Supervised | null = null;
  let stopSignal: NodeJS.Signals | null = null;
  const uninstall = onStopSignals((s) => {
    stopSignal ??= s;
    if (child) child.signal(s);
    else stopping.abort();
  });
  let current: { held: boolean } | null = null;
  // as in run: no term to resign, or a failing backend, closes within a short bound
  let quick = false;
  // as in run: a term that ran out while stopped is found lost before the command continues
  const unjob = onJobControl(
    () => child,
    () => void current?.held,
  );
  try {
    for (;;) {
      let term;
      try {
        term = await election.campaign({ signal: stopping.signal });
      } catch (e) {
        quick = true;
        if (stopping.signal.aborted && stopSignal) return exitCodeOf({ code: null, signal: stopSignal });
        throw toCliError(e);
      }
      current = term;
      let demoted = false;
      // as in run: the listener goes on before the command starts, and a term lost meanwhile
      // (its signal already aborted) is caught right after, so no command runs unaware of it
      const onLost = () => {
        if (demoted || !(term.signal.reason instanceof LeaseLostError)) return;
        demoted = true;
        if (!child) return;
        say(`demoted: ${term.signal.reason.message}; stopping the command and campaigning again`);
        void child.stop(graceMs);
      };
      term.signal.addEventListener('abort', onLost, { once: true });
      if (term.signal.aborted) onLost();
      if (demoted) {
        say(`demoted before the command started: ${term.signal.reason.message}; campaigning again`);
        // a pause of one ttl (10 ms at least), not a busy loop, when a term cannot outlive its start
        await sleep(Math.max(10, ttlMs), stopping.signal).catch(() => {});
        continue;
      }
      say(`leading "${name}" as ${value} (fence ${term.fence}); starting the command`);
      const c = (child = start(command, leaseEnv(term, { LEASEHOLD_LEADER: value }), graceMs, term, ttlMs));
      if (term.signal.aborted) onLost(); // lost while the command was being started
      const exit = await outcome(c, command[0]!);
      child = null;
      if (demoted && !stopSignal) continue;
      await election.resign().catch(() => {
        quick = true;
      });
      return exitCodeOf(exit);
    }
  } finally {
    uninstall();
    unjob();
    await closeLocks(locks, quick);
  }
}
