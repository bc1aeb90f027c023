/**
 * A section's scope: what the section started (worker processes, redis-servers, client
 * connections), so that a section past its time budget can be stopped — its processes killed, its
 * clients closed, its signal aborted — before the next section starts. Without this a late section
 * kept running beside the next one (its workers competing for the two cores, its clients for the
 * servers) and disturbed that section's measurements.
 *
 * The scope is found through AsyncLocalStorage: procs.ts and clients.ts register what they start
 * in the scope of the section whose code started it, even code that runs after the section was
 * stopped (which is then stopped at once), and a later section's scope never sees it.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { ChildProcess } from 'node:child_process';
import { errText } from './stats.js';

const storage = new AsyncLocalStorage<SectionScope>();

const alive = (p: ChildProcess) => p.exitCode === null && p.signalCode === null;

export class SectionScope {
  private readonly controller = new AbortController();
  private readonly procs = new Set<ChildProcess>();
  private readonly closers = new Set<() => unknown>();

  constructor(readonly name: string) {}

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get stopped(): boolean {
    return this.controller.signal.aborted;
  }

  /** A process the section started: killed when the section is stopped (at once if it already is). */
  adopt(p: ChildProcess): void {
    if (this.stopped) return kill(p);
    this.procs.add(p);
    p.once('exit', () => this.procs.delete(p));
  }

  /** Closes something the section opened (a client) when the section is stopped (at once if it already is). */
  onStop(close: () => unknown): void {
    if (this.stopped) return void settle(close);
    this.closers.add(close);
  }

  /** Aborts the signal, kills the processes and closes the clients; waits (bounded) for the processes to exit. */
  async stop(reason: Error, graceMs = 3000): Promise<void> {
    if (this.stopped) return;
    this.controller.abort(reason);
    const procs = [...this.procs];
    const exited = procs.filter(alive).map((p) => new Promise<void>((r) => p.once('exit', () => r())));
    for (const p of procs) kill(p);
    const closers = [...this.closers];
    this.closers.clear();
    await bounded(Promise.all([...exited, ...closers.map(settle)]), graceMs);
  }
}

function kill(p: ChildProcess): void {
  if (!alive(p) || p.pid === undefined) return;
  try {
    process.kill(p.pid, 'SIGCONT'); // a stopped (SIGSTOP) process must be resumed to die cleanly
    process.kill(p.pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

async function settle(close: () => unknown): Promise<void> {
  try {
    await close();
  } catch {
    /* already closed, or broken: either way it is not in use */
  }
}

/** Resolves true when `p` settled within `ms`, false when not (without leaving a timer behind). */
async function bounded(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((r) => (timer = setTimeout(() => r(false), ms)));
  try {
    const settled = p.catch(() => {}).then(() => true);
    return await Promise.race([settled, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The scope of the section whose code is running, if any. */
export const currentScope = (): SectionScope | undefined => storage.getStore();

/** Registers a closer with the running section's scope (nothing outside a section). */
export function closeOnStop(close: () => unknown): void {
  currentScope()?.onStop(close);
}

/** Throws the stop reason when the running section was stopped (a loop's check between steps). */
export function throwIfStopped(): void {
  currentScope()?.signal.throwIfAborted();
}

export type SectionOutcome<T> =
  { ok: true; value: T } | { ok: false; error: string; /** true: past its budget, stopped */ stopped: boolean };

export interface SectionOptions {
  /** After a stop, how long to wait for the section's own code to unwind (its finally blocks). */
  windDownMs?: number;
  log?: (line: string) => void;
}

/**
 * Runs `f` in a scope of its own with a time budget. Within the budget: its value or its error.
 * Past it: the section is stopped (signal aborted, processes killed, clients closed), its code gets
 * up to `windDownMs` to unwind, and only then does this resolve — so the next section starts on a
 * quiet machine — with an error, never the late section's value.
 */
export async function runSection<T>(
  name: string,
  budgetMs: number,
  f: (signal: AbortSignal) => Promise<T>,
  o: SectionOptions = {},
): Promise<SectionOutcome<T>> {
  const scope = new SectionScope(name);
  const run = storage.run(scope, async () => f(scope.signal));
  let outcome: SectionOutcome<T> | undefined;
  const settled = run.then(
    (value) => void (outcome ??= { ok: true, value }),
    (e: unknown) => void (outcome ??= { ok: false, error: errText(e), stopped: false }),
  );
  await bounded(settled, budgetMs);
  if (outcome) return outcome;
  const error = `${name} did not finish within ${budgetMs}ms`;
  outcome = { ok: false, error: `${error}; stopped`, stopped: true };
  o.log?.(`${error}: stopping it (killing its processes, closing its clients)`);
  await scope.stop(new Error(error));
  const windDownMs = o.windDownMs ?? 15_000;
  if (!(await bounded(settled, windDownMs))) {
    o.log?.(`${name} did not wind down within ${windDownMs}ms of its stop; going on without it`);
  }
  return outcome;
}
