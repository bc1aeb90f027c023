/** `leasehold status [prefix]` and `leasehold release <key> --force`. */
import type { LockInfo } from '../index.js';
import { checkKey } from '../validate.js';
import {
  CliError,
  EXIT,
  formatMs,
  openLocks,
  closeLocks,
  palette,
  say,
  sayWarnings,
  timeLeft,
  toCliError,
  usage,
  type BackendFlags,
} from './common.js';

export interface StatusFlags extends BackendFlags {
  json?: boolean;
  color?: boolean;
}

const asJson = (info: LockInfo) => ({
  key: info.key,
  fence: String(info.fence),
  remainingMs: info.remainingMs,
  ...(info.value === undefined ? {} : { value: info.value }),
});

export async function status(prefix: string | undefined, flags: StatusFlags): Promise<number> {
  if (prefix !== undefined && prefix !== '') checkKey(prefix, 'prefix');
  sayWarnings();
  const { locks } = await openLocks(flags);
  const rows: LockInfo[] = [];
  let failed = false;
  try {
    for await (const info of locks.list(prefix ?? '')) rows.push(info);
  } catch (e) {
    failed = true;
    throw toCliError(e);
  } finally {
    await closeLocks(locks, failed); // nothing is held: a failing backend is not waited for
  }
  rows.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  if (flags.json) {
    process.stdout.write(JSON.stringify(rows.map(asJson), null, 2) + '\n');
    return EXIT.OK;
  }
  if (rows.length === 0) {
    process.stdout.write(`no locks held${prefix ? ` under "${prefix}"` : ''}\n`);
    return EXIT.OK;
  }
  const p = palette(process.stdout, flags.color !== false);
  const table = [
    ['KEY', 'FENCE', 'HOLDER', 'LEFT'],
    ...rows.map((r) => [r.key, String(r.fence), r.value ?? '-', formatMs(r.remainingMs)]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  table.forEach((row, i) => {
    const line = row.map((cell, j) => (j === row.length - 1 ? cell : cell.padEnd(widths[j]!))).join('  ');
    process.stdout.write((i === 0 ? p.bold(line) : line) + '\n');
  });
  return EXIT.OK;
}

export interface ReleaseFlags extends BackendFlags {
  force?: boolean;
  json?: boolean;
}

export async function release(key: string, flags: ReleaseFlags): Promise<number> {
  checkKey(key);
  if (!flags.force) {
    throw usage(`release breaks a lock someone else holds; add --force if that is what you mean`);
  }
  sayWarnings();
  const { locks, backend } = await openLocks(flags);
  let failed = false;
  try {
    if (!backend.forceRelease) {
      throw new CliError(`the ${backend.name} backend cannot break a lock (no forceRelease)`, EXIT.UNAVAILABLE);
    }
    let broken: LockInfo | null;
    try {
      broken = await backend.forceRelease(`${flags.prefix}:${key}`);
    } catch (e) {
      failed = true;
      throw toCliError(e);
    }
    const shown = broken ? { ...broken, key } : null;
    if (flags.json) {
      process.stdout.write(
        JSON.stringify(shown ? { released: true, ...asJson(shown) } : { released: false, key }) + '\n',
      );
    } else if (shown) {
      const who = shown.value === undefined ? '' : `, holder ${shown.value}`;
      say(
        `broke the lock on "${key}" (fence ${shown.fence}${who}, ${timeLeft(shown.remainingMs)}); its holder loses it at its next renewal`,
      );
    } else {
      say(`"${key}" was not held; nothing to release`);
    }
    return EXIT.OK;
  } finally {
    await closeLocks(locks, failed);
  }
}
