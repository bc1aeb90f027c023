/**
 * Hunting for secrets in what the library hands back: every error, every diagnostics_channel
 * message, `util.inspect` and JSON. A deep walk over own properties (enumerable or not, string
 * or symbol keys), causes, arrays, maps and sets, plus `util.inspect` with hidden properties.
 */
import diagnostics from 'node:diagnostics_channel';
import { inspect } from 'node:util';
import type { AcquireRequest, Backend } from '../../src/backend.js';

export const CHANNELS = ['acquire', 'release', 'extend', 'lost', 'wait'].map((c) => `leasehold:${c}`);

/** Collects every message published on the leasehold channels until `stop()`. */
export function collectEvents(): { messages: unknown[]; stop(): void } {
  const messages: unknown[] = [];
  const subs = CHANNELS.map((name) => {
    const fn = (m: unknown) => messages.push(m);
    diagnostics.subscribe(name, fn);
    return () => diagnostics.unsubscribe(name, fn);
  });
  return { messages, stop: () => subs.forEach((u) => u()) };
}

/** Every string reachable from `root`, with the path that reached it. */
export function strings(root: unknown): Array<[path: string, value: string]> {
  const out: Array<[string, string]> = [];
  const seen = new Set<unknown>();
  const walk = (v: unknown, path: string, depth: number) => {
    if (typeof v === 'string') return void out.push([path, v]);
    if (typeof v === 'bigint' || typeof v === 'number') return void out.push([path, String(v)]);
    if (v === null || (typeof v !== 'object' && typeof v !== 'function') || depth > 25 || seen.has(v)) return;
    seen.add(v);
    if (v instanceof Map) {
      for (const [k, x] of v) {
        walk(k, `${path}<key>`, depth + 1);
        walk(x, `${path}<${String(k)}>`, depth + 1);
      }
    }
    if (v instanceof Set) for (const x of v) walk(x, `${path}<item>`, depth + 1);
    if (typeof v === 'function') return; // a function's source is not data
    for (const key of Reflect.ownKeys(v)) {
      const d = Object.getOwnPropertyDescriptor(v, key);
      if (!d || !('value' in d)) continue; // getters are not walked (they may compute)
      walk(d.value, `${path}.${String(key)}`, depth + 1);
    }
  };
  walk(root, '$', 0);
  return out;
}

/** Fails with the path of the first secret found in `root` (deep walk, inspect, JSON). */
export function findSecret(root: unknown, secrets: readonly string[]): string | null {
  const live = secrets.filter((s) => s.length >= 6);
  for (const [path, s] of strings(root)) {
    for (const secret of live) if (s.includes(secret)) return `${path} holds a secret: ${s.slice(0, 200)}`;
  }
  const shown = inspect(root, { depth: 12, showHidden: true, getters: false });
  for (const secret of live) if (shown.includes(secret)) return `util.inspect shows a secret: ${shown.slice(0, 300)}`;
  let json: string;
  try {
    json = JSON.stringify(root, (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)) ?? '';
  } catch {
    json = ''; // a cycle: nothing of it would be printed as JSON either
  }
  for (const secret of live) if (json.includes(secret)) return `JSON shows a secret: ${json.slice(0, 300)}`;
  return null;
}

/** The backend as is, but every token the engine sends is recorded (to look for it later). */
export function recordTokens(inner: Backend, tokens: Set<string>): Backend {
  const acquire = (key: string, req: AcquireRequest) => {
    tokens.add(req.token);
    return inner.acquire(key, req);
  };
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'acquire') return acquire;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

/** Runs `p` and keeps what it threw (or resolved to) for the hunt. */
export async function keep(into: unknown[], p: Promise<unknown> | (() => Promise<unknown>)): Promise<unknown> {
  try {
    const v = await (typeof p === 'function' ? p() : p);
    into.push(v);
    return v;
  } catch (e) {
    into.push(e);
    return e;
  }
}
