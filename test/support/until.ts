/** Small waits for tests: a condition polled until it holds, and how long a promise took. */

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `ok` every 25 ms until it holds; throws naming `what` after `ms`. */
export async function until(what: string, ok: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await ok()) return;
    await sleep(25);
  }
  throw new Error(`timed out after ${ms}ms waiting for ${what}`);
}

/** How long `p` took, or Infinity when it had not settled after `ms`. */
export async function took(p: Promise<unknown>, ms: number): Promise<number> {
  const t0 = performance.now();
  const done = await Promise.race([p.then(() => true), sleep(ms).then(() => false)]);
  return done ? performance.now() - t0 : Infinity;
}
