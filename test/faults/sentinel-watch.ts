/**
 * What the Sentinels do on their own during a scenario, recorded in its history. The harness's
 * `failovers` scenario kills a master and records it; but Sentinel may also fail over a master
 * that is alive (it missed pings for down-after-milliseconds: a busy machine, a paused process),
 * and then two masters take writes until a Sentinel turns the old one into a replica — which
 * discards its data, the locks granted on it included. A CI run met that: an overlap 10 s after a
 * failover nobody recorded (stop 32's note). Each Sentinel's own events, on its pub/sub:
 *
 *   +switch-master <name> <old ip> <old port> <new ip> <new port>
 *   +convert-to-slave slave <ip>:<port> <ip> <port> @ <name> <master ip> <master port>
 *
 * are recorded as faults that may break locks (asynchronous replication: a grant the new master
 * never saw is gone for whoever asks it). When the old master was still running at the switch,
 * the span until it is converted (or until the watch stops) is one fault: a grant on either
 * master may meet a grant on the other anywhere in it (`sinceT`, test/faults/checker.ts).
 */
import { Redis } from 'ioredis';
import { nodeRunning } from '../support/failover.js';
import { SENTINEL_MASTER, SENTINELS } from '../support/sentinel.js';

export type Recorder = (f: string, value?: Record<string, unknown>) => void;

/** Subscribes to the events of every Sentinel that answers (one at least); the result stops it. */
export async function watchSentinels(record: Recorder, now: () => number): Promise<() => Promise<void>> {
  const seen = new Map<string, number>(); // event + payload → when first seen (3 Sentinels tell alike)
  const open = new Map<number, number>(); // old master still running → when it was replaced
  const onEvent = (channel: string, payload: string) => {
    const parts = payload.split(' ');
    const t = now();
    const id = `${channel} ${payload}`;
    const first = seen.get(id);
    if (first !== undefined && t - first < 10_000) return;
    seen.set(id, t);
    if (channel === '+switch-master' && parts[0] === SENTINEL_MASTER) {
      const from = Number(parts[2]);
      const to = Number(parts[4]);
      const running = nodeRunning(from);
      record('sentinel-switch-master', { from, to, oldMasterRunning: running, fault: true, mayBreakLocks: true });
      if (running && !open.has(from)) open.set(from, t);
    } else if (channel === '+convert-to-slave' && payload.includes(`@ ${SENTINEL_MASTER} `)) {
      const port = Number(parts[3]);
      const sinceT = open.get(port);
      open.delete(port);
      record('sentinel-convert-to-replica', {
        port,
        fault: true,
        mayBreakLocks: true,
        ...(sinceT !== undefined ? { sinceT } : {}),
      });
    }
  };
  const subs = SENTINELS.map((s) => {
    const r = new Redis({ host: s.host, port: s.port, lazyConnect: true, maxRetriesPerRequest: 1 });
    r.on('error', () => {});
    r.on('message', onEvent);
    return r;
  });
  // a Sentinel down now is one whose events the others repeat (every Sentinel tells a switch)
  const ok = await Promise.all(
    subs
      .map(async (r) => {
        await r.connect();
        await r.subscribe('+switch-master', '+convert-to-slave');
        return true;
      })
      .map((p) => p.catch(() => false)),
  );
  if (!ok.includes(true)) {
    for (const r of subs) r.disconnect();
    throw new Error('no Sentinel answered: their events could not be watched');
  }
  return async () => {
    for (const [port, sinceT] of open) {
      record('sentinel-two-masters-end', { port, fault: true, mayBreakLocks: true, sinceT });
    }
    open.clear();
    for (const r of subs) r.disconnect();
  };
}
