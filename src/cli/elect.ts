/**
 * `leasehold elect <name> -- <command…>`: campaign; while leader, run the command (with
 * LEASEHOLD_KEY, LEASEHOLD_FENCE, LEASEHOLD_TOKEN and LEASEHOLD_LEADER); on demotion stop it and
 * campaign again. When the command ends by itself, resign and exit with its code.
 */
import { LeaseLostError } from '../index.js';
import { checkKey } from '../validate.js';
import { CliError, defaultHolder, duration, EXIT, openLocks, say, toCliError, type BackendFlags } from './common.js';
import { leaseEnv, outcome, start } from './run.js';
import { exitCodeOf, onStopSignals, type Supervised } from './supervise.js';

export interface ElectFlags extends BackendFlags {
  ttl: string;
  grace: string;
  value?: string;
}

export async function elect(name: string, command: string[], flags: ElectFlags): Promise<number> {
  checkKey(name, 'election name');
  const ttlMs = duration(flags.ttl, '--ttl');
  const graceMs = duration(flags.grace, '--grace', true);
  const value = flags.value ?? defaultHolder();
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
  try {
    for (;;) {
      let term;
      try {
        term = await election.campaign({ signal: stopping.signal });
      } catch (e) {
        if (stopping.signal.aborted && stopSignal) return exitCodeOf({ code: null, signal: stopSignal });
        throw toCliError(e);
      }
      say(`leading "${name}" as ${value} (fence ${term.fence}); starting the command`);
      const c = start(command, leaseEnv(term, { LEASEHOLD_LEADER: value }), graceMs);
      child = c;
      let demoted = false;
      term.signal.addEventListener(
        'abort',
        () => {
          if (!(term.signal.reason instanceof LeaseLostError)) return;
          demoted = true;
          say(`demoted: ${term.signal.reason.message}; stopping the command and campaigning again`);
          void c.stop(graceMs);
        },
        { once: true },
      );
      const exit = await outcome(c, command[0]!);
      child = null;
      if (demoted && !stopSignal) continue;
      await election.resign().catch(() => {});
      return exitCodeOf(exit);
    }
  } finally {
    uninstall();
    await locks.close().catch(() => {});
  }
}
