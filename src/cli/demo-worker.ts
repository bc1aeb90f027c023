/**
 * One worker process of `leasehold demo` (the hidden `demo-worker` command): takes the lock,
 * "works", writes its result to the demo's fenced resource (in the parent, over IPC) with its
 * fence, releases. It reports every step to the parent with a timestamp on the host's monotonic
 * clock. It never checks its lease before writing — as code paused mid-write could not.
 */
import { createLocks, fromUrl, LeaseLostError } from '../index.js';

export interface DemoEvent {
  type: 'event';
  t: number;
  worker: string;
  what: 'granted' | 'accepted' | 'rejected' | 'released' | 'lost' | 'done' | 'failed';
  fence?: string;
  detail?: string;
}
export type ToParent = DemoEvent | { type: 'write'; id: number; fence: string; worker: string };
export type ToWorker = { type: 'write-result'; id: number; ok: boolean; highest: string };

export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function demoWorker(o: {
  db: string;
  name: string;
  ttl: string;
  jobs: number;
  work: number;
}): Promise<number> {
  const send = (m: ToParent) => process.send?.(m);
  const event = (what: DemoEvent['what'], extra: Partial<DemoEvent> = {}) =>
    send({ type: 'event', t: monotonicMs(), worker: o.name, what, ...extra });
  let nextId = 0;
  const pending = new Map<number, (r: ToWorker) => void>();
  process.on('message', (m: ToWorker) => pending.get(m.id)?.(m));
  const write = (fence: bigint) =>
    new Promise<ToWorker>((resolve) => {
      const id = ++nextId;
      pending.set(id, resolve);
      send({ type: 'write', id, fence: String(fence), worker: o.name });
    });

  const locks = createLocks(await fromUrl(`sqlite:${o.db}`), { ttl: o.ttl, prefix: 'demo' });
  try {
    for (let job = 0; job < o.jobs; job++) {
      const lease = await locks.acquire('report', { value: o.name, wait: '60s' });
      const fence = String(lease.fence);
      event('granted', { fence });
      lease.signal.addEventListener('abort', () => {
        if (lease.signal.reason instanceof LeaseLostError)
          event('lost', { fence, detail: lease.signal.reason.message });
      });
      await sleep(o.work); // the work; a pause here outlives the lease
      const r = await write(lease.fence);
      event(r.ok ? 'accepted' : 'rejected', { fence, detail: r.highest });
      const released = await lease.release();
      event('released', { fence, detail: released ? 'released' : 'no longer ours' });
      await sleep(30 + Math.random() * 60);
    }
    event('done');
    return 0;
  } catch (e) {
    event('failed', { detail: e instanceof Error ? e.message : String(e) });
    return 70;
  } finally {
    await locks.close().catch(() => {});
    process.disconnect?.();
  }
}
