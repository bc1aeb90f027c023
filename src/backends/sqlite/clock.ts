/**
 * The one clock every process on the host reads for lease expiry. On Linux that is
 * CLOCK_MONOTONIC (`process.hrtime`), shared by all processes of the machine and immune to wall
 * clock steps (NTP, an operator's `date -s`); it restarts at boot, so it comes with the kernel's
 * boot id, and a database last used under another boot id is known to hold only dead leases.
 * Elsewhere — and on Linux without a readable boot id (no /proc/sys: a systemd unit with
 * `ProcSubset=pid`) — it is the wall clock, which continues across reboots. The two never share a
 * file: schema.ts refuses the change while a lease could be live.
 */
import { readFileSync } from 'node:fs';

export interface HostClock {
  /** `mono:<boot id>` or `wall`: what the stored expiries are measured in. */
  readonly id: string;
  /** Whether a change of `id` means a reboot (every holder died; unsynced commits may be lost). */
  readonly monotonic: boolean;
  /** Milliseconds (an integer) on this clock. */
  now(): number;
}

/** Where Linux tells the boot id. */
export const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';

function bootId(): string | null {
  if (process.platform !== 'linux') return null;
  try {
    const id = readFileSync(BOOT_ID_FILE, 'utf8').trim();
    return /^[0-9a-f-]{16,64}$/i.test(id) ? id : null;
  } catch {
    return null;
  }
}

let cached: HostClock | undefined;

export function hostClock(): HostClock {
  if (cached) return cached;
  const boot = bootId();
  cached = boot
    ? { id: `mono:${boot}`, monotonic: true, now: () => Number(process.hrtime.bigint() / 1_000_000n) }
    : { id: 'wall', monotonic: false, now: () => Date.now() };
  return cached;
}
