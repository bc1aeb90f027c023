/**
 * bench/run.ts runs each section with a time budget (lib/scope.ts runSection). A section past it
 * must be stopped — the processes it forked killed, the clients it opened closed — before the next
 * section starts, and its late results dropped: it used to keep running beside the next sections
 * and disturb their measurements. On 6379.
 */
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

// the bench's clients module loads leasehold from dist/ unless told to use the source (no build here)
process.env.LEASEHOLD_BENCH_SOURCE = '1';
const { ioredis, quit } = await import('../../bench/lib/clients.js');
const { forkTs } = await import('../../bench/lib/procs.js');
const { runSection } = await import('../../bench/lib/scope.js');
const { sleep } = await import('../../bench/lib/stats.js');

const CHILD = fileURLToPath(new URL('./fixtures/idle-child.ts', import.meta.url));
const alive = (p: ChildProcess) => p.exitCode === null && p.signalCode === null;

test('a section past its budget is stopped (child killed, client loop ended) before the next one starts', async () => {
  const key = `bench:test-section-budget:${process.pid}:${Date.now()}`;
  const admin = await ioredis(6379);
  let child: ChildProcess | undefined;
  let signal: AbortSignal | undefined;
  let loopEnded = false;
  let atNext: { childAlive: boolean; loopEnded: boolean; counterMoved: boolean } | undefined;
  try {
    const late = await runSection(
      'late',
      1500,
      async (s) => {
        signal = s;
        child = forkTs(CHILD);
        const c = await ioredis(6379);
        try {
          // a section's work that never ends by itself: a counter in Redis
          for (;;) {
            await c.incr(key);
            await sleep(5);
          }
        } finally {
          loopEnded = true;
        }
      },
      { windDownMs: 5000 },
    );
    const next = await runSection('next', 10_000, async () => {
      const before = await admin.get(key);
      for (let i = 0; i < 50; i++) await admin.ping(); // the next section's own round trips
      atNext = { childAlive: alive(child!), loopEnded, counterMoved: (await admin.get(key)) !== before };
      return 'measured';
    });
    expect(Number(await admin.get(key))).toBeGreaterThan(0); // the loop did run
    expect(atNext).toEqual({ childAlive: false, loopEnded: true, counterMoved: false });
    expect(late).toMatchObject({ ok: false, stopped: true });
    expect(late.ok ? null : late.error).toMatch(/late did not finish within 1500ms/);
    expect(signal?.aborted).toBe(true);
    expect(next).toEqual({ ok: true, value: 'measured' });
  } finally {
    if (child && alive(child)) child.kill('SIGKILL');
    await admin.del(key);
    await quit(admin);
  }
});

test('a section within its budget gives its value, or its error, and is not stopped', async () => {
  let signal: AbortSignal | undefined;
  const ok = await runSection('quick', 10_000, async (s) => {
    signal = s;
    const c = await ioredis(6379);
    try {
      return await c.ping();
    } finally {
      await quit(c);
    }
  });
  expect(ok).toEqual({ ok: true, value: 'PONG' });
  expect(signal?.aborted).toBe(false);
  const failed = await runSection('failing', 10_000, () => Promise.reject(new Error('services down')));
  expect(failed).toEqual({ ok: false, error: 'services down', stopped: false });
});
