/**
 * Arguments of the small paired harnesses under bench/ (handoff-local, pg-handoff-local,
 * pg-contended, uncontended-paired): `--name <number>` options and `--dist <dir>` builds (several:
 * one subject each; none: this checkout's dist/).
 */
import { resolve } from 'node:path';

export const args = process.argv.slice(2);

/** The number after `--<name>`, or `dflt`. */
export function opt(name: string, dflt: number): number {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : dflt;
}

/** Every `--dist <dir>`, resolved (default: dist/). */
export function dists(): string[] {
  const out = args.flatMap((a, i) => (a === '--dist' ? [resolve(args[i + 1]!)] : []));
  if (out.length === 0) out.push(resolve('dist'));
  return out;
}
