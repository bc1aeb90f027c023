import { InvalidArgumentError } from './errors.js';

/** Milliseconds, or a string such as `'250ms'`, `'30s'`, `'5m'`, `'1h'`, `'1.5s'`. */
export type Duration = number | string;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PATTERN = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/;
/** Longest duration accepted anywhere: about 24.8 days, the largest a Node timer can wait. */
export const MAX_DURATION_MS = 2_147_483_647;

/**
 * Parses a duration to whole milliseconds. `allowZero` admits 0 (for waits); TTLs need ≥ 1.
 * Throws InvalidArgumentError for NaN, Infinity, negatives, junk, and > MAX_DURATION_MS.
 */
export function toMs(value: unknown, name: string, { allowZero = false } = {}): number {
  let ms: number;
  if (typeof value === 'number') {
    ms = value;
  } else if (typeof value === 'string') {
    const m = PATTERN.exec(value);
    if (!m)
      throw new InvalidArgumentError(`${name}: "${value}" is not a duration (use ms or '250ms', '30s', '5m', '1h')`);
    ms = Number(m[1]) * UNITS[m[2] ?? 'ms']!;
  } else {
    throw new InvalidArgumentError(
      `${name} must be a number of milliseconds or a string like '30s', got ${typeof value}`,
    );
  }
  if (!Number.isFinite(ms)) throw new InvalidArgumentError(`${name} must be finite, got ${String(value)}`);
  if (ms < 0 || (ms === 0 && !allowZero)) {
    throw new InvalidArgumentError(`${name} must be ${allowZero ? '≥ 0' : '> 0'}, got ${String(value)}`);
  }
  if (ms > MAX_DURATION_MS)
    throw new InvalidArgumentError(`${name} must be at most ${MAX_DURATION_MS}ms (~24.8 days), got ${String(value)}`);
  return Math.ceil(ms);
}
