/** A recording wrapper around a real backend: counts calls and in-flight acquires. */
import type { AcquireRequest, Backend, ExtendItem, Grant } from '../../src/backend.js';

export interface Spy extends Backend {
  calls: number;
  extendBatches: number[];
  inFlight: number;
  maxInFlight: number;
  /** Resolves after the next acquire attempt that came back null (the caller is waiting). */
  nextRefusal(): Promise<void>;
}

export function spy(inner: Backend): Spy {
  let refusals: Array<() => void> = [];
  const s: Spy = {
    name: inner.name,
    capabilities: inner.capabilities,
    calls: 0,
    extendBatches: [],
    inFlight: 0,
    maxInFlight: 0,
    nextRefusal: () => new Promise((r) => refusals.push(r)),
    async acquire(key: string, req: AcquireRequest): Promise<Grant | null> {
      s.calls++;
      s.inFlight++;
      s.maxInFlight = Math.max(s.maxInFlight, s.inFlight);
      try {
        const g = await inner.acquire(key, req);
        if (!g) {
          const r = refusals;
          refusals = [];
          r.forEach((f) => f());
        }
        return g;
      } finally {
        s.inFlight--;
      }
    },
    extend(items: readonly ExtendItem[]) {
      s.calls++;
      s.extendBatches.push(items.length);
      return inner.extend(items);
    },
    release(key: string, token: string) {
      s.calls++;
      return inner.release(key, token);
    },
    close: () => inner.close(),
  };
  if (inner.leave) s.leave = (k, t) => (s.calls++, inner.leave!(k, t));
  if (inner.keep) s.keep = (k, t, ms) => (s.calls++, inner.keep!(k, t, ms));
  if (inner.waitForChange) s.waitForChange = (k, sig, ms) => inner.waitForChange!(k, sig, ms);
  if (inner.inspect) s.inspect = (k) => (s.calls++, inner.inspect!(k));
  if (inner.list) s.list = (p) => (s.calls++, inner.list!(p));
  if (inner.watch) s.watch = (k, fn) => (s.calls++, inner.watch!(k, fn));
  if (inner.forceRelease) s.forceRelease = (k) => (s.calls++, inner.forceRelease!(k));
  if (inner.keep) s.keep = (k, t, ms) => (s.calls++, inner.keep!(k, t, ms));
  if (inner.renewSessions)
    s.renewSessions = (ids) => (s.calls++, s.extendBatches.push(ids.length), inner.renewSessions!(ids));
  if (inner.onLost) s.onLost = (cb) => inner.onLost!(cb);
  if (inner.results) s.results = inner.results;
  return s;
}
