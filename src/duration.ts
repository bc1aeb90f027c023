import { InvalidArgumentError } from './errors.js';
import type { WarningEvent } from './events.js';

/**
 * Milliseconds (a number), or a string with a unit, in the forms of the `ms` package:
 * `'250ms'`, `'30s'`, `'30S'`, `'5m'`, `'1.5h'`, `'1d'`, `'2 minutes'`, `'1w'`, plus compounds
 * such as `'1m30s'` or `'1h 30m'`. A string without a unit (`'10'`) is refused.
 */
export type Duration = number | string;

/** Unit names as the `ms` package spells them (case-insensitive), in milliseconds. */
const UNITS: Record<string, number> = {};
for (const [ms, names] of [
  [1, ['ms', 'msec', 'msecs', 'millisecond', 'milliseconds']],
  [1000, ['s', 'sec', 'secs', 'second', 'seconds']],
  [60_000, ['m', 'min', 'mins', 'minute', 'minutes']],
  [3_600_000, ['h', 'hr', 'hrs', 'hour', 'hours']],
  [86_400_000, ['d', 'day', 'days']],
  [604_800_000, ['w', 'week', 'weeks']],
  [31_557_600_000, ['y', 'yr', 'yrs', 'year', 'years']], // as `ms` has it; always over the maximum
] as const) {
  for (const name of names) UNITS[name] = ms;
}
const NUMBER = String.raw`(\d+(?:\.\d+)?|\.\d+)`;
const UNIT = String.raw`([a-z]+)`;
/** One part: a number and a unit, spaces allowed between them. */
const PART = new RegExp(String.raw`${NUMBER} *${UNIT}`, 'giy');
const BARE = new RegExp(String.raw`^[+-]?${NUMBER}$`);
const HINT = "a number of ms, or a string like '250ms', '30s', '5m', '1h', '1m30s', '2 minutes'";

/** Longest duration accepted anywhere: about 24.8 days, the largest a Node timer can wait. */
export const MAX_DURATION_MS = 2_147_483_647;

/**
 * A TTL shorter than this is too short to be renewed reliably: renewal runs every ttl/3, so an
 * event-loop stall, GC pause or slow round trip of about 2/3 of the TTL loses the lease. Such a
 * TTL is accepted, with a warning on the `leasehold:warning` channel.
 */
export const MIN_RENEWABLE_TTL_MS = 1000;

/** Parses a duration string to (fractional) milliseconds, or explains why not. */
function parse(text: string, name: string, allowZero: boolean): number {
  const s = text.trim().toLowerCase();
  if (s.length === 0 || s.length > 100)
    throw new InvalidArgumentError(`${name}: "${clip(text)}" is not a duration (${HINT})`);
  // a negative number (with a unit or not) is told as such, not as a missing unit
  if (/^-\s*\.?\d/.test(s))
    throw new InvalidArgumentError(`${name} must be ${allowZero ? '≥ 0' : '> 0'}, got "${clip(text)}"`);
  if (BARE.test(s)) {
    throw new InvalidArgumentError(
      `${name}: "${text}" has no unit; pass a number (${s}) for milliseconds or add a unit ('${s}ms', '${s}s')`,
    );
  }
  if (s.startsWith('-')) throw new InvalidArgumentError(`${name}: "${clip(text)}" is not a duration (${HINT})`);
  let total = 0;
  let at = 0;
  PART.lastIndex = 0;
  while (at < s.length) {
    PART.lastIndex = at;
    const m = PART.exec(s);
    const factor = m ? UNITS[m[2]!] : undefined;
    if (!m || factor === undefined) {
      throw new InvalidArgumentError(`${name}: "${clip(text)}" is not a duration (${HINT})`);
    }
    total += Number(m[1]) * factor;
    at = PART.lastIndex;
    while (s[at] === ' ') at++; // '1h 30m'
  }
  return total;
}

const clip = (s: string): string => (s.length > 40 ? `${s.slice(0, 40)}…` : s);

/**
 * Parses a duration to whole milliseconds (rounded up). `allowZero` admits 0 (for waits); TTLs
 * need ≥ 1. Throws InvalidArgumentError for NaN, Infinity, negatives, a string without a unit,
 * junk, and anything over MAX_DURATION_MS.
 */
export function toMs(value: unknown, name: string, { allowZero = false } = {}): number {
  let ms: number;
  if (typeof value === 'number') {
    ms = value;
  } else if (typeof value === 'string') {
    ms = parse(value, name, allowZero);
  } else {
    throw new InvalidArgumentError(`${name} must be ${HINT}; got ${value === null ? 'null' : typeof value}`);
  }
  if (!Number.isFinite(ms)) throw new InvalidArgumentError(`${name} must be finite, got ${String(value)}`);
  if (ms < 0 || (ms === 0 && !allowZero)) {
    throw new InvalidArgumentError(`${name} must be ${allowZero ? '≥ 0' : '> 0'}, got ${String(value)}`);
  }
  if (ms > MAX_DURATION_MS)
    throw new InvalidArgumentError(`${name} must be at most ${MAX_DURATION_MS}ms (~24.8 days), got ${String(value)}`);
  return Math.ceil(ms);
}

/** The `leasehold:warning` event for a renewed lease whose TTL is below MIN_RENEWABLE_TTL_MS, else null. */
export function smallTtlWarning(ttlMs: number, key?: string): WarningEvent | null {
  if (ttlMs >= MIN_RENEWABLE_TTL_MS) return null;
  const every = Math.max(1, Math.floor(ttlMs / 3));
  return {
    code: 'LEASEHOLD_SMALL_TTL',
    message:
      `ttl ${ttlMs}ms is too short to be renewed reliably: renewal runs every ${every}ms, so a pause ` +
      `(GC, event-loop stall, slow round trip) of about ${ttlMs - every}ms loses the lease; ` +
      `use a ttl of at least ${MIN_RENEWABLE_TTL_MS}ms (or renew: false for a lease that is not renewed)`,
    ttlMs,
    ...(key === undefined ? {} : { key }),
  };
}
