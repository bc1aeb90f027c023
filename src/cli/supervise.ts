/**
 * The command a `run` or `elect` protects: started in its own process group (so a stop reaches
 * everything it started), told of SIGINT / SIGTERM / SIGHUP that reach leasehold, stopped with
 * SIGTERM then SIGKILL after a grace period. A watchdog (`sh`, reading a pipe from leasehold)
 * stops the group if leasehold itself dies, even by SIGKILL: the command never outlives the
 * process that holds its lease by more than the grace period. leasehold tells the watchdog, every
 * `everyMs`, how long its lease is still valid: a leasehold that stops telling (stopped by
 * SIGSTOP, and so renewing nothing) gets its command stopped when that runs out, before the
 * lock's next holder can start. Its own session has no
 * controlling terminal (a prompt on /dev/tty fails); Ctrl-Z reaches it through onJobControl.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { constants } from 'node:os';
import { formatMs, say } from './common.js';

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** The shell's convention: the exit code of a process, 128 + n if signal n ended it. */
export function exitCodeOf(e: Exit): number {
  if (e.signal) return 128 + (constants.signals[e.signal] ?? 0);
  return e.code ?? 1;
}

export const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/** What the watchdog is told: how long the lease is valid (ms; not finite: no bound), every `everyMs`. */
export interface Validity {
  remaining: () => number;
  everyMs: number;
}

/**
 * The watchdog: a line on stdin (seconds the lease is still valid, or `-`) re-arms a timer; the
 * timer running out, or leasehold's end of the pipe closing (leasehold died), stops the group:
 * SIGTERM (and SIGCONT, should it be stopped), SIGKILL after the grace period. A timer is a
 * subshell sleeping in the background; the trap ends its sleep with it when it is re-armed.
 */
const WATCHDOG = [
  'pg=$0; grace=$1; t=',
  'stop() { kill -TERM "-$pg" 2>/dev/null || exit 0; kill -CONT "-$pg" 2>/dev/null; sleep "$grace"; kill -KILL "-$pg" 2>/dev/null; exit 0; }',
  'disarm() { if [ -n "$t" ]; then kill "$t" 2>/dev/null; t=; fi; }',
  'while read s; do',
  '  disarm',
  '  if [ "$s" != "-" ]; then ( trap \'kill "$z" 2>/dev/null; exit 0\' TERM; sleep "$s" & z=$!; wait "$z" && stop ) & t=$!; fi',
  'done',
  'disarm',
  'stop',
].join('\n');

export class Supervised {
  readonly done: Promise<Exit>;
  private readonly child: ChildProcess;
  private watchdog: ChildProcess | null = null;
  private exited = false;
  private beat: NodeJS.Timeout | null = null;
  private tell: (() => void) | null = null;

  /** Starts `argv`; rejects (via `done`) with ENOENT / EACCES errors as exit 127 / 126. */
  constructor(argv: readonly string[], env: NodeJS.ProcessEnv, graceMs: number, validity?: Validity) {
    const [file, ...args] = argv;
    this.child = spawn(file!, args, { stdio: 'inherit', env, detached: process.platform !== 'win32' });
    this.done = new Promise<Exit>((resolve, reject) => {
      this.child.once('error', (e: NodeJS.ErrnoException) => {
        this.exited = true;
        this.stopWatchdog();
        reject(e);
      });
      this.child.once('exit', (code, signal) => {
        // what it left in its group (`job &`) must not run on once the lock is released: stopped
        // first, with the watchdog still on guard in case leasehold is killed meanwhile
        void this.clearGroup(graceMs).then(() => {
          this.exited = true;
          this.stopWatchdog();
          resolve({ code, signal });
        });
      });
    });
    this.done.catch(() => {});
    if (this.child.pid !== undefined && process.platform !== 'win32') this.startWatchdog(this.child.pid, graceMs);
    if (this.watchdog && validity) {
      const tell = (this.tell = () => {
        const ms = validity.remaining();
        this.watchdog?.stdin?.write(Number.isFinite(ms) ? `${(Math.max(0, ms) / 1000).toFixed(3)}\n` : '-\n');
      });
      tell();
      this.beat = setInterval(tell, Math.max(1, validity.everyMs));
      this.beat.unref();
    }
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /**
   * Sends `signal` to the command's process group. A command stopped by leasehold itself (Ctrl-Z)
   * does nothing while stopped: the watchdog's deadline is off until SIGCONT (then the lease is
   * checked first, see onJobControl), and re-armed with it.
   */
  signal(signal: NodeJS.Signals): void {
    if (this.exited || this.child.pid === undefined) return;
    if (signal === 'SIGSTOP') this.watchdog?.stdin?.write('-\n');
    try {
      if (process.platform === 'win32') this.child.kill(signal);
      else process.kill(-this.child.pid, signal);
    } catch {
      /* already gone */
    }
    if (signal === 'SIGCONT') this.tell?.();
  }

  /** SIGTERM, then SIGKILL after `graceMs` if it is still there; resolves with its exit. */
  async stop(graceMs: number): Promise<Exit> {
    this.signal('SIGTERM');
    const timer = setTimeout(() => this.signal('SIGKILL'), graceMs);
    try {
      return await this.done;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Whether any process of the command's group is still there. */
  private groupAlive(): boolean {
    try {
      process.kill(-this.child.pid!, 0);
      return true;
    } catch (e) {
      return (e as NodeJS.ErrnoException).code === 'EPERM';
    }
  }

  /**
   * The command has exited; processes it left in its group get SIGTERM (and SIGCONT, should they
   * be stopped), SIGKILL after `graceMs`. Bounded: a zombie nobody reaps (a container's PID 1 that
   * does not) still counts as a member, so the wait ends a second after SIGKILL whatever remains.
   */
  private async clearGroup(graceMs: number): Promise<void> {
    if (process.platform === 'win32' || this.child.pid === undefined || !this.groupAlive()) return;
    say(
      `the command exited and left processes in its group running; stopping them (SIGTERM, then SIGKILL after ${formatMs(graceMs)})`,
    );
    this.signal('SIGTERM');
    this.signal('SIGCONT');
    const killAt = performance.now() + graceMs;
    let giveUpAt = Infinity;
    while (this.groupAlive() && performance.now() < giveUpAt) {
      if (giveUpAt === Infinity && performance.now() >= killAt) {
        this.signal('SIGKILL');
        giveUpAt = performance.now() + 1000;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  private startWatchdog(pid: number, graceMs: number): void {
    const grace = Math.max(1, Math.ceil(graceMs / 1000));
    try {
      const w = spawn('/bin/sh', ['-c', WATCHDOG, String(pid), String(grace)], {
        stdio: ['pipe', 'ignore', 'ignore'],
        detached: true,
      });
      w.on('error', () => {});
      w.stdin!.on('error', () => {});
      w.unref();
      (w.stdin as unknown as { unref?: () => void }).unref?.();
      this.watchdog = w;
    } catch {
      this.watchdog = null; // no /bin/sh: the command is still stopped on loss and on signals
    }
  }

  /** The command is gone: the watchdog must not signal a group id the system may reuse. */
  private stopWatchdog(): void {
    if (this.beat) clearInterval(this.beat);
    this.beat = null;
    const w = this.watchdog;
    this.watchdog = null;
    if (!w || w.exitCode !== null || w.pid === undefined) return;
    try {
      process.kill(-w.pid, 'SIGKILL'); // its group: the shell and an armed timer with it
    } catch {
      w.kill('SIGKILL');
    }
  }
}

/**
 * Job control (Ctrl-Z): the command is in its own session, out of reach of the terminal's SIGTSTP,
 * and a stopped leasehold cannot renew its lease — so SIGTSTP stops the command's group
 * (SIGSTOP) and then leasehold itself; SIGCONT (`fg`, `bg`) runs `beforeResume` first (a lease
 * that ran out meanwhile is found lost there, and the command is sent SIGTERM) and then continues
 * the command. Returns the uninstaller.
 */
export function onJobControl(child: () => Supervised | null, beforeResume: () => void): () => void {
  if (process.platform === 'win32') return () => {};
  const tstp = () => {
    child()?.signal('SIGSTOP');
    process.kill(process.pid, 'SIGSTOP');
  };
  const cont = () => {
    beforeResume();
    child()?.signal('SIGCONT');
  };
  process.on('SIGTSTP', tstp);
  process.on('SIGCONT', cont);
  return () => {
    process.off('SIGTSTP', tstp);
    process.off('SIGCONT', cont);
  };
}

/** Forwards the usual stop signals to `onSignal` while installed; returns the uninstaller. */
export function onStopSignals(onSignal: (signal: NodeJS.Signals) => void): () => void {
  const handlers = FORWARDED.map((s) => [s, () => onSignal(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  return () => {
    for (const [s, h] of handlers) process.off(s, h);
  };
}
