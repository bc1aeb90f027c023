/**
 * bench/handoff-local.ts counts a row's Redis scripts on its own clients (countCommands), not with
 * the shared server's INFO commandstats, which counts every other client's scripts too. On 6379.
 */
import { expect, test } from 'vitest';
import { countCommands, ioredis, quit } from '../../bench/lib/clients.js';

test("counts only this client's EVALSHA / EVAL while another client runs scripts on the same server", async () => {
  const [ours, other] = await Promise.all([ioredis(6379), ioredis(6379)]);
  try {
    const counter = countCommands(ours, ['evalsha', 'eval']);
    const sha = String(await other.script('LOAD', 'return 1'));
    const noise = Promise.all(Array.from({ length: 50 }, () => other.evalsha(sha, 0)));
    for (let i = 0; i < 5; i++) await ours.evalsha(sha, 0);
    await ours.eval('return 2', 0);
    await ours.ping(); // not a script
    await noise;
    expect(counter.count).toBe(6);
  } finally {
    await Promise.all([quit(ours), quit(other)]);
  }
});
