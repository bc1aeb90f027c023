/**
 * A CPU profile of one measurement window (not of the process's start-up, which dwarfs it), when
 * LEASEHOLD_BENCH_PROFILE=<dir> is set: `startProfile(file)` starts the inspector's profiler and
 * returns the function that stops it and writes <dir>/<file>.cpuprofile (open it in Chrome
 * DevTools or speedscope). Without the variable both are no-ops.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { dirname, join } from 'node:path';

export async function startProfile(file: string): Promise<() => Promise<void>> {
  const dir = process.env.LEASEHOLD_BENCH_PROFILE;
  if (!dir) return async () => {};
  const path = join(dir, `${file}.cpuprofile`);
  mkdirSync(dirname(path), { recursive: true });
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return async () => {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(path, JSON.stringify(profile));
    session.disconnect();
  };
}
