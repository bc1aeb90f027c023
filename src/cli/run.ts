/**
 * `leasehold run <key> -- <command…>`: acquire, renew while the command runs, release when it
 * ends; the command gets LEASEHOLD_KEY, LEASEHOLD_FENCE and LEASEHOLD_TOKEN. A lost lease stops
 * it (SIGTERM, SIGKILL after the grace period) and exits 79; a held key exits 75 (or 0 with
 * --skip-if-busy, which without --wait makes one attempt).
 */
import { LeaseLostError, LockTimeoutError, MAX_DURATION_MS, type Lease, type Locks } from '../index.js';
import { checkKey } from '../validate.js';
import { race } from '../wait.js';
import {
  CliError,
  defaultHolder,
  duration,
  EXIT,
  formatMs,
  openLocks,
  closeLocks,
  QUICK_CLOSE_MS,
  say,
  toCliError,
  failing,
  sayWarnings,
  timeLeft,
  type BackendFlags,
} from './common.js';
import { exitCodeOf, onJobControl, onStopSignals, Supervised, type Exit } from './supervise.js';

export interface RunFlags extends BackendFlags {
  ttl: string;
  wait?: string;
  skipIfBusy?: boolean;
  grace: string;
  value?: string;
}

/** The environment of a protected command. */
export function leaseEnv(lease: Lease, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    LEASEHOLD_KEY: lease.key,
    LEASEHOLD_FENCE: String(lease.fence),
    LEASEHOLD_TOKEN: lease.token,
    ...extra,
  };
}

/**
 * "held by host:pid (fence 7, 12.0s left)" — what a busy run says about the holder. Asked within
 * QUICK_CLOSE_MS: a backend that went away during the wait would hold the exit for opTimeout.
 */
async function holderOf(locks: Locks, key: string): Promise<string> {
  const info = await race(locks.inspect(key), { ms: QUICK_CLOSE_MS }).catch(() => null);
  if (!info) return 'held by another holder';
  const who = info.value ? `held by ${info.value}` : 'held';
  return `${who} (fence ${info.fence}, ${timeLeft(info.remainingMs)})`;
}

/** Starts the command; a missing or non-executable file is exit 127 / 126, as in a shell. */
export function start(
  command: readonly string[],
  env: NodeJS.ProcessEnv,
  graceMs: number,
  lease: Lease,
  ttlMs: number,
): Supervised {
  // told at least 4 times per ttl: a renewed lease has more than half a ttl left, so the watchdog
  // hears of the renewal before the validity it last heard of runs out
  return new Supervised(command, env, graceMs, { remaining: () => lease.remaining(), everyMs: ttlMs / 4 });
}

/** Waits for the command; maps spawn errors to the shell's 127 / 126. */
export async function outcome(child: Supervised, name: string): Promise<Exit> {
  try {
    return await child.done;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new CliError(`command not found: ${name}`, 127);
    if (code === 'EACCES') throw new CliError(`permission denied: ${name}`, 126);
    throw new CliError(`could not start ${name}: ${(e as Error).message}`, 126);
  }
}

export async function run(key: string, command: string[], flags: RunFlags): Promise<number> {
  checkKey(key);
  const ttlMs = duration(flags.ttl, '--ttl');
  // --skip-if-busy alone is one attempt: a cron run that waited for the previous one would queue
  // behind it and run anyway, the very overlap skipping exists to prevent
  const waitMs =
    flags.wait === undefined ? (flags.skipIfBusy ? 0 : MAX_DURATION_MS) : duration(flags.wait, '--wait', true);
  const graceMs = duration(flags.grace, '--grace', true);
  sayWarnings();
  const { locks, backend } = await openLocks(flags, ttlMs);
  const stopping = new AbortController();
  let child: Supervised | null = null;
  const uninstall = onStopSignals((s) => {
    if (child) child.signal(s);
    else
      stopping.abort(
        new CliError(`interrupted by ${s} while waiting for "${key}"`, exitCodeOf({ code: null, signal: s })),
      );
  });
  let current: Lease | null = null;
  // set when nothing is left to release (no lease, a lost one) or the backend is failing: then
  // closing is bounded short, not opTimeout for a call in flight plus a goodbye the server never answers
  let quick = false;
  // reading `held` past the lease's validity marks it lost: the command gets SIGTERM before SIGCONT
  const unjob = onJobControl(
    () => child,
    () => void current?.held,
  );
  try {
    const value = flags.value ?? (backend.capabilities.value ? defaultHolder() : undefined);
    const opts = { ...(value === undefined ? {} : { value }), signal: stopping.signal };
    let lease: Lease | null;
    try {
      lease = waitMs === 0 ? await locks.tryAcquire(key, opts) : await locks.acquire(key, { ...opts, wait: waitMs });
    } catch (e) {
      quick = true;
      if (stopping.signal.aborted) throw stopping.signal.reason;
      if (!(e instanceof LockTimeoutError) || failing(e)) throw toCliError(e);
      lease = null;
    }
    if (!lease) {
      quick = true;
      const why = `"${key}" is ${await holderOf(locks, key)}`;
      if (flags.skipIfBusy) {
        say(`${why}; skipped`);
        return EXIT.OK;
      }
      throw new CliError(why, EXIT.BUSY);
    }
    const held = (current = lease);
    let lost: LeaseLostError | null = null;
    // the listener goes on before the command starts, and a lease lost meanwhile (its signal
    // already aborted: a listener added now would never run) is caught right after: otherwise
    // the command would run on, unaware, next to the lock's next holder
    const onLost = () => {
      if (lost || !(held.signal.reason instanceof LeaseLostError)) return;
      lost = held.signal.reason;
      quick = true;
      if (!child) return; // not started: said below
      say(`${lost.message}; stopping the command (SIGTERM, then SIGKILL after ${formatMs(graceMs)})`);
      void child.stop(graceMs);
    };
    held.signal.addEventListener('abort', onLost, { once: true });
    if (held.signal.aborted) onLost();
    if (lost) {
      say(`${(lost as LeaseLostError).message}; the command was not started`);
      throw new CliError('', EXIT.LOST);
    }
    const c = (child = start(command, leaseEnv(held), graceMs, held, ttlMs));
    if (held.signal.aborted) onLost(); // lost while the command was being started
    const exit = await outcome(c, command[0]!);
    await held.release().catch(() => {
      quick = true; // the backend is failing: the lease runs out on its own
    });
    if (lost) throw new CliError('', EXIT.LOST); // said when it happened
    return exitCodeOf(exit);
  } finally {
    uninstall();
    unjob();
    await closeLocks(locks, quick);
  }
}
