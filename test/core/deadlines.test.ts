/**
 * The shared deadline timer (src/deadlines.ts) behind every bounded call, race and wait: it fires
 * what is due in order across bounds, never what was removed, and keeps the process alive only
 * while a deadline is pending (as one `setTimeout` per call did).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { after, cancel, deadlines, Timed } from '../../src/deadlines.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

class Mark extends Timed {
  constructor(
    readonly name: string,
    readonly log: string[],
  ) {
    super();
  }
  fire(): void {
    this.log.push(this.name);
  }
}

describe('deadlines', () => {
  test('fire in due order across different bounds; removed ones never fire', async () => {
    const log: string[] = [];
    const a = new Mark('a', log);
    const b = new Mark('b', log);
    const c = new Mark('c', log);
    const d = new Mark('d', log);
    deadlines.add(a, 120);
    deadlines.add(b, 40);
    deadlines.add(c, 80);
    deadlines.add(d, 60);
    deadlines.remove(d);
    deadlines.remove(d); // twice: nothing
    await sleep(300);
    expect(log).toEqual(['b', 'c', 'a']);
  });

  test('an earlier deadline added after a later one re-arms the timer', async () => {
    const log: string[] = [];
    const t0 = performance.now();
    let firedAt = 0;
    const late = after(5000, () => log.push('late'));
    after(30, () => {
      firedAt = performance.now() - t0;
      log.push('early');
    });
    await sleep(400);
    cancel(late);
    expect(log).toEqual(['early']);
    expect(firedAt).toBeGreaterThanOrEqual(29);
    expect(firedAt).toBeLessThan(300);
  });

  test('a deadline added from inside a firing one is scheduled', async () => {
    const log: string[] = [];
    after(10, () => {
      log.push('first');
      after(10, () => log.push('second'));
    });
    await sleep(300);
    expect(log).toEqual(['first', 'second']);
  });

  const child = (code: string) =>
    new Promise<{ ms: number; out: string }>((resolve, reject) => {
      const t0 = performance.now();
      const src = fileURLToPath(new URL('../../src/index.ts', import.meta.url));
      const mem = fileURLToPath(new URL('../../src/backends/memory/index.ts', import.meta.url));
      const script = `const { createLocks } = await import(${JSON.stringify(src)}); const { memory } = await import(${JSON.stringify(mem)}); ${code}`;
      execFile(
        process.execPath,
        ['--import', 'tsx', '--input-type=module', '-e', script],
        { timeout: 20_000 },
        (e, out) => (e ? reject(e) : resolve({ ms: performance.now() - t0, out })),
      );
    });

  test('a process whose calls all answered exits at once (no deadline keeps it alive)', async () => {
    const base = await child(`console.log('ok')`);
    const r = await child(
      `const l = createLocks(memory(), { opTimeout: '10s', renew: false }); await (await l.acquire('k')).release(); console.log('ok')`,
    );
    expect(r.out.trim()).toBe('ok');
    expect(r.ms - base.ms).toBeLessThan(5000); // far below the 10 s bound a pending timer would wait
  });

  test('a call that never answers keeps the process alive until its bound rejects it', async () => {
    const r = await child(
      `const b = memory(); b.acquire = () => new Promise(() => {}); const l = createLocks(b, { opTimeout: 300 });
       try { await l.acquire('k', { wait: 0 }); } catch (e) { console.log(e.name) }`,
    );
    expect(r.out.trim()).toMatch(/Error/);
  });
});
