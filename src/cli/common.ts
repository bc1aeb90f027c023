/**
 * What every command of the CLI shares: exit codes, the one-line error, the backend from
 * `--url` / `LEASEHOLD_URL` / the embedded default, and colour.
 */
import { subscribe } from 'node:diagnostics_channel';
import { hostname } from 'node:os';
import {
  createLocks,
  fromUrl,
  InvalidArgumentError,
  LeaseholdError,
  redactUrl,
  toMs,
  type Backend,
  type Locks,
} from '../index.js';
import { pathFromUrl } from '../backends/sqlite/url.js';
import { checkTtl } from '../lease.js';
import { checkString } from '../validate.js';
import { redactText } from '../scrub.js';
import { race } from '../wait.js';

/** Exit codes (sysexits.h where one fits). */
export const EXIT = {
  OK: 0,
  /** Bad command line. */
  USAGE: 64,
  /** The backend cannot be reached (or lacks what the command needs). */
  UNAVAILABLE: 69,
  /** An unexpected failure. */
  SOFTWARE: 70,
  /** The lock is held by someone else (`--wait` ran out); try again later. */
  BUSY: 75,
  /** The lease was lost while the command ran; the command was stopped. */
  LOST: 79,
} as const;

/** An error that ends the CLI with `exitCode` and one line on stderr. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

export const usage = (message: string) => new CliError(message, EXIT.USAGE);

/**
 * One line on stderr, prefixed `leasehold:`, with the credentials of every URL in it hidden by the
 * library's redactText (everything up to a URL's last `@`, `?password=` values: a password may
 * hold a raw `/`, `@`, `?` or `#`).
 */
export function say(message: string): void {
  process.stderr.write(`leasehold: ${redactText(message).replace(/\s*\n\s*/g, ' ')}\n`);
}

/**
 * A wait that ran out while the backend was failing (its LockTimeoutError's cause is the last
 * attempt's BackendError or QuorumError): the backend is unavailable, not the lock busy.
 */
export function failing(e: LeaseholdError): boolean {
  const c = e.cause;
  return c instanceof LeaseholdError && (c.code === 'LEASEHOLD_BACKEND' || c.code === 'LEASEHOLD_QUORUM');
}

/** Maps any error to a CliError: usage errors, unreachable backends, the rest. */
export function toCliError(e: unknown): CliError {
  if (e instanceof CliError) return e;
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof InvalidArgumentError) return new CliError(message, EXIT.USAGE);
  if (e instanceof LeaseholdError) {
    if (['LEASEHOLD_BACKEND', 'LEASEHOLD_QUORUM', 'LEASEHOLD_MISSING_PEER', 'LEASEHOLD_UNSUPPORTED'].includes(e.code))
      return new CliError(message, EXIT.UNAVAILABLE);
    if (e.code === 'LEASEHOLD_LOCK_TIMEOUT') return new CliError(message, failing(e) ? EXIT.UNAVAILABLE : EXIT.BUSY);
  }
  return new CliError(message, EXIT.SOFTWARE);
}

/** Options every command that talks to a backend takes. */
export interface BackendFlags {
  url?: string[];
  prefix: string;
}

/** The URLs to use: `--url` (repeatable), else `LEASEHOLD_URL` (whitespace-separated), else `sqlite:`. */
export function urlsOf(flags: BackendFlags, env: NodeJS.ProcessEnv = process.env): string[] {
  if (flags.url && flags.url.length > 0) return flags.url;
  const fromEnv = (env.LEASEHOLD_URL ?? '').split(/\s+/).filter(Boolean);
  return fromEnv.length > 0 ? fromEnv : ['sqlite:'];
}

/** A printable name of the backend (no password). */
export const describeUrls = (urls: readonly string[]) => urls.map(redactUrl).join(' ');

/**
 * Says the library's warnings on stderr (`leasehold:warning`: a TTL too short to renew, a backend
 * failing while a wait retries), each message once.
 */
export function sayWarnings(): void {
  const said = new Set<string>();
  subscribe('leasehold:warning', (m) => {
    const { message } = m as { message: string };
    if (said.has(message)) return;
    if (said.size < 100) said.add(message);
    say(`warning: ${message}`);
  });
}

/**
 * A backend whose locks live inside one process: `memory:`, and SQLite's `:memory:` database
 * (`sqlite::memory:`). Every leasehold command is a process of its own, so such locks would
 * exclude nothing: two `leasehold run` of one key would both run.
 */
function inProcessOnly(url: string): boolean {
  const u = url.trim();
  if (/^memory:(\/\/)?$/i.test(u)) return true;
  if (!/^sqlite:/i.test(u)) return false;
  try {
    return pathFromUrl(u) === ':memory:';
  } catch {
    return false; // malformed: fromUrl says why
  }
}

/** Builds the backend; an unreachable one is exit 69, a malformed URL exit 64. */
export async function openBackend(flags: BackendFlags): Promise<{ backend: Backend; urls: string[] }> {
  const urls = urlsOf(flags);
  const local = urls.find(inProcessOnly);
  if (local !== undefined) {
    throw usage(
      `${local.trim()} keeps its locks inside one process, and every leasehold command is a process of its own: ` +
        'they would exclude nothing. Use sqlite: (the default: a file shared by the processes of this host) or a server URL',
    );
  }
  try {
    const backend = await fromUrl(urls.length === 1 ? urls[0]! : urls);
    return { backend, urls };
  } catch (e) {
    const err = toCliError(e);
    // whatever kept the backend from opening (a refused connection, a missing package): unavailable
    throw err.exitCode === EXIT.USAGE ? err : new CliError(err.message, EXIT.UNAVAILABLE);
  }
}

export async function openLocks(
  flags: BackendFlags,
  ttlMs?: number,
): Promise<{ locks: Locks; backend: Backend; urls: string[] }> {
  // createLocks's own checks, made before the backend is opened: a bad flag is a usage error at
  // once, not exit 69 after a connect attempt, nor the default SQLite file created for nothing
  checkString(flags.prefix, '--prefix', 256);
  if (ttlMs !== undefined) checkTtl(ttlMs, '--ttl: a ttl');
  const { backend, urls } = await openBackend(flags);
  try {
    const locks = createLocks(backend, { prefix: flags.prefix, ...(ttlMs === undefined ? {} : { ttl: ttlMs }) });
    return { locks, backend, urls };
  } catch (e) {
    await backend.close().catch(() => {});
    throw toCliError(e);
  }
}

/**
 * How long closing may take when the CLI exits with nothing left to release: a lost lease (not
 * ours any more), an exhausted wait or a failing backend (the server is not answering). A full
 * `locks.close()` would wait out a call in flight (opTimeout) and a polite goodbye on top.
 */
export const QUICK_CLOSE_MS = 1000;

/**
 * Closes `locks`: in full on a normal exit (every lease released, token-checked, the client
 * closed politely), at most QUICK_CLOSE_MS when `quick`. The process exits right after, which
 * drops whatever was left.
 */
export async function closeLocks(locks: Locks, quick: boolean): Promise<void> {
  const closing = locks.close().catch(() => {});
  if (quick) await race(closing, { ms: QUICK_CLOSE_MS }).catch(() => {});
  else await closing;
}

/** A duration flag (`30s`, `1m30s`, `250ms`; a bare `0` where zero is allowed); a bad one is a usage error. */
export function duration(value: string, flag: string, allowZero = false): number {
  const bare = /^\s*(\d+(?:\.\d+)?)\s*$/.exec(value);
  if (bare) {
    if (Number(bare[1]) === 0) {
      if (allowZero) return 0;
      throw new InvalidArgumentError(`${flag} must be > 0, got "${value}"`);
    }
    throw new InvalidArgumentError(`${flag}: "${value}" has no unit; add one: '${bare[1]}s' or '${bare[1]}ms'`);
  }
  try {
    return toMs(value, flag, { allowZero });
  } catch (e) {
    // the library's hint offers "a number of ms", which the command line refuses (above)
    if (e instanceof InvalidArgumentError)
      e.message = e.message.replace('a number of ms, or a string like', 'a number with a unit, like');
    throw e;
  }
}

/** What `status` shows as the holder when none was given: this host and process. */
export const defaultHolder = () => `${hostname()}:${process.pid}`;

/** "12.0s left", or for a session backend (no time left to tell) "held for the holder's session". */
export const timeLeft = (ms: number) => (ms < 0 ? "held for the holder's session" : `${formatMs(ms)} left`);

export function formatMs(ms: number): string {
  if (ms < 0) return 'session';
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)}s`;
  if (ms < 3_600_000) return `${Math.round(ms / 1000)}s`;
  return `${(ms / 3_600_000).toFixed(1)}h`;
}

/** ANSI colour for a stream, honouring NO_COLOR, FORCE_COLOR, TERM and `--no-color`. */
export function palette(stream: NodeJS.WriteStream, enabled = true) {
  const force = process.env.FORCE_COLOR;
  const on =
    enabled &&
    !('NO_COLOR' in process.env && process.env.NO_COLOR !== '') &&
    (force !== undefined && force !== '' ? force !== '0' && force !== 'false' : stream.isTTY && stream.hasColors?.());
  const c = (code: string) => (s: string) => (on ? `\x1b[${code}m${s}\x1b[0m` : s);
  return {
    on: !!on,
    bold: c('1'),
    dim: c('2'),
    red: c('31'),
    green: c('32'),
    yellow: c('33'),
    blue: c('34'),
    magenta: c('35'),
    cyan: c('36'),
  };
}
export type Palette = ReturnType<typeof palette>;
