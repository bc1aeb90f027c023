/**
 * One contender process (forked by the harness with `--import tsx`). On `run` it loops until
 * `halt`: acquire → fenced read of the resource → a deliberate gap → fenced write of read+1 →
 * release, reporting every step to the parent as a history event (see types.ts). It does not
 * check `lease.signal` before writing, on purpose: a stale write must be stopped by the fence at
 * the resource, not by the holder's good manners. Renewals and loss are reported from the
 * `leasehold:extend` channel and from `lease.signal`.
 */
import diagnostics from 'node:diagnostics_channel';
import type { ExtendEvent } from '../../src/events.js';
import { createLocks, LeaseLostError, LeaseholdError, type Lease } from '../../src/index.js';
import { connect } from './connect.js';
import { openResource } from './resource.js';
import { clock, type Ev, type FromWorker, rng, sleep, type ToWorker, type WorkerConfig } from './types.js';

const send = (m: FromWorker) => {
  if (process.connected) process.send!(m);
};
const errText = (e: unknown) =>
  e instanceof LeaseholdError ? e.code : e instanceof Error ? `${e.name}: ${e.message}` : String(e);

let halt: AbortController | null = null;
let running: Promise<void> | null = null;

process.on('message', (m: ToWorker) => {
  if (m.kind === 'ping') send({ kind: 'pong', t: clock() });
  else if (m.kind === 'halt') halt?.abort();
  else if (m.kind === 'run' && !running) {
    halt = new AbortController();
    running = loop(m.p, m.config, halt.signal)
      .then(
        () => send({ kind: 'halted', p: m.p }),
        (e: unknown) => send({ kind: 'fatal', p: m.p, error: errText(e) }),
      )
      .finally(() => {
        running = null;
        halt = null;
      });
  }
});
process.on('disconnect', () => process.exit(0)); // the harness is gone: so are we
process.on('unhandledRejection', (e) => {
  // with the stack: the rejection's origin is what a report of this needs
  send({
    kind: 'fatal',
    p: -1,
    error: `unhandled rejection: ${errText(e)}${e instanceof Error ? `\n${e.stack}` : ''}`,
  });
});

async function loop(p: number, cfg: WorkerConfig, stop: AbortSignal): Promise<void> {
  const ev = (type: Ev['type'], f: string, fence?: string, value?: Record<string, unknown>) => {
    const e: Ev = { t: clock(), p, type, f };
    if (fence !== undefined) e.fence = fence;
    if (value !== undefined) e.value = value;
    send({ kind: 'ev', ev: e });
  };
  const r = rng(cfg.seed);
  const uniform = ([lo, hi]: readonly [number, number]) => lo + r.next() * (hi - lo);
  const { backend, close } = await connect(cfg, p);
  const locks = createLocks(backend, { ttl: cfg.ttlMs, wait: cfg.waitMs, prefix: cfg.prefix });
  const resource = await openResource(cfg.resource);
  const leases = new Map<string, Lease>();
  /** The holder's own deadline on the shared clock: now + what the lease says is left. */
  const deadline = (l: Lease) => clock() + l.remaining();
  const onExtend = (m: unknown) => {
    const x = m as ExtendEvent;
    const l = x.key === cfg.key ? leases.get(String(x.fence)) : undefined;
    if (!l) return;
    // the keeper publishes before it updates the lease: read the new deadline right after
    queueMicrotask(() =>
      ev('info', 'renew', String(x.fence), {
        ok: x.ok,
        ...(x.ok && l.held ? { deadline: deadline(l) } : {}),
        ...(x.error !== undefined ? { error: errText(x.error) } : {}),
      }),
    );
  };
  diagnostics.subscribe('leasehold:extend', onExtend);
  // a second witness of loss, for the reader of a history (the checker goes by `lost`, from the
  // signal): the engine publishes this before it aborts the signal
  const onLost = (m: unknown) => {
    const x = m as { key: string; fence: bigint; reason: string };
    if (x.key === cfg.key) ev('info', 'lost-event', String(x.fence), { reason: x.reason });
  };
  diagnostics.subscribe('leasehold:lost', onLost);
  let n = 0;
  try {
    while (!stop.aborted) {
      ev('invoke', 'acquire');
      let lease: Lease;
      try {
        lease = await locks.acquire(cfg.key, { signal: stop });
      } catch (e) {
        ev('fail', 'acquire', undefined, { error: errText(e) });
        await sleep(uniform(cfg.thinkMs) + 20, stop);
        continue;
      }
      const fence = lease.fence.toString();
      leases.set(fence, lease);
      ev('ok', 'acquire', fence, { deadline: deadline(lease) });
      const onAbort = () => {
        const why = lease.signal.reason;
        if (why instanceof LeaseLostError) ev('info', 'lost', fence, { reason: why.message });
      };
      // a lease granted past its deadline (a starved process) is lost before a listener is added
      if (lease.signal.aborted) onAbort();
      else lease.signal.addEventListener('abort', onAbort, { once: true });
      const id = `${p}.${++n}`;
      ev('invoke', 'read', fence, { id });
      let read: Awaited<ReturnType<typeof resource.read>> | null = null;
      try {
        read = await resource.read(fence, id);
        if (read.ok) ev('ok', 'read', fence, { value: read.value });
        else ev('fail', 'read', fence, { stale: true, highest: read.highest });
      } catch (e) {
        ev('info', 'read', fence, { error: errText(e) });
      }
      if (read?.ok) {
        await sleep(uniform(r.next() < cfg.longGapP ? cfg.longGapMs : cfg.gapMs)); // where a fault falls
        const value = read.value + 1;
        ev('invoke', 'write', fence, { value, from: read.value, id });
        try {
          const w = await resource.write(fence, value, read.value, id);
          if (w.ok) ev('ok', 'write', fence, { value });
          else ev('fail', 'write', fence, { stale: true, highest: w.highest });
        } catch (e) {
          ev('info', 'write', fence, { error: errText(e) });
        }
      }
      // the engine's own view, read without the expiry check that `held` makes (which would mark
      // a lease past its deadline lost here, and hide a keeper that never did)
      ev('invoke', 'release', fence, { state: (lease as unknown as { state: string }).state });
      try {
        const released = await lease.release();
        ev('ok', 'release', fence, { released });
      } catch (e) {
        ev('fail', 'release', fence, { error: errText(e) });
      }
      leases.delete(fence);
      await sleep(uniform(cfg.thinkMs), stop);
    }
  } finally {
    diagnostics.unsubscribe('leasehold:extend', onExtend);
    diagnostics.unsubscribe('leasehold:lost', onLost);
    await Promise.race([locks.close().catch(() => {}), sleep(2000)]);
    await Promise.race([close(), sleep(1000)]);
    await resource.close();
  }
}

send({ kind: 'ready' });
