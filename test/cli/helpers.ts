/**
 * The CLI tests run the real built executable (`dist/cli/index.js`) as a user would: a separate
 * process, its exit code, its stdout and stderr. The build runs once, when it is missing or older
 * than the sources.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureBuilt as buildIfStale } from '../../scripts/built.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const BIN = join(ROOT, 'dist/cli/index.js');
export const JOB = fileURLToPath(new URL('./job.mjs', import.meta.url));

/** Builds dist/ (the library and the CLI) unless it is newer than every source file. */
export const ensureBuilt = (): void => buildIfStale(ROOT);

export interface Done {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

export interface Running {
  proc: ChildProcess;
  done: Promise<Done>;
}

const live = new Set<ChildProcess>();

/** Starts `leasehold <args>`; `env` is added to a copy of this process's environment. */
export function start(args: string[], env: Record<string, string | undefined> = {}): Running {
  const t0 = performance.now();
  const proc = spawn(process.execPath, [BIN, ...args], {
    env: { ...process.env, NO_COLOR: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(proc);
  let stdout = '';
  let stderr = '';
  proc.stdout!.on('data', (d) => (stdout += d));
  proc.stderr!.on('data', (d) => (stderr += d));
  const done = new Promise<Done>((resolve) =>
    proc.on('close', (code, signal) => {
      live.delete(proc);
      resolve({ code, signal, stdout, stderr, ms: performance.now() - t0 });
    }),
  );
  return { proc, done };
}

/** Runs `leasehold <args>` to the end. */
export const cli = (args: string[], env: Record<string, string | undefined> = {}) => start(args, env).done;

/** Kills whatever a test left running. */
export function killAll(): void {
  for (const p of live) p.kill('SIGKILL');
  live.clear();
}

export interface JobLine {
  ev: 'start' | 'end' | 'term';
  t: number;
  pid: number;
  tag: string;
  key?: string;
  fence?: string;
  hasToken: boolean;
  leader?: string;
}

export function readLog(file: string): JobLine[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as JobLine);
}

export const monotonic = () => Number(process.hrtime.bigint()) / 1e6;

/** Polls `pred` every 20 ms until it holds, or fails after `ms`. */
export async function until(pred: () => boolean, ms: number, what: string): Promise<void> {
  const end = performance.now() + ms;
  while (!pred()) {
    if (performance.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
