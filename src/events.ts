/**
 * Instrumentation through node:diagnostics_channel. The library never logs; subscribe with
 * `diagnostics_channel.subscribe('leasehold:acquire', fn)`. Messages never carry a token.
 */
// a named import: a default import would need esModuleInterop in users' CommonJS projects
import { channel, type Channel } from 'node:diagnostics_channel';

export interface AcquireEvent {
  backend: string;
  key: string;
  fence: bigint;
  waitedMs: number;
  attempts: number;
}
export interface ReleaseEvent {
  backend: string;
  key: string;
  fence: bigint;
  released: boolean;
  error?: unknown;
}
export interface ExtendEvent {
  backend: string;
  key: string;
  fence: bigint;
  ok: boolean;
  batch: number;
  error?: unknown;
}
export interface LostEvent {
  backend: string;
  key: string;
  fence: bigint;
  reason: string;
  cause?: unknown;
}
export interface WaitEvent {
  backend: string;
  key: string;
  phase: 'start' | 'end';
  waitedMs?: number;
  outcome?: 'acquired' | 'timeout' | 'aborted' | 'error';
}

/**
 * A configuration that works but is likely to hurt (the library never logs it itself).
 * `LEASEHOLD_SMALL_TTL`: a renewed lease whose TTL is below `MIN_RENEWABLE_TTL_MS`.
 * `LEASEHOLD_NODE_DOWN`: `fromUrl([...])` opened Redlock with a minority of its nodes unreachable.
 * `LEASEHOLD_REDIS_EVICTION`: Redis session mode on a server with a `maxmemory` and a policy that
 * evicts (docs/redis.md, "Eviction").
 */
export interface WarningEvent {
  code: string;
  message: string;
  /** The key (as the caller named it) when the warning is about one call. */
  key?: string;
  ttlMs?: number;
}

export const channels = {
  acquire: channel('leasehold:acquire'),
  release: channel('leasehold:release'),
  extend: channel('leasehold:extend'),
  lost: channel('leasehold:lost'),
  wait: channel('leasehold:wait'),
  warning: channel('leasehold:warning'),
};

export function emit(ch: Channel, message: object): void {
  if (ch.hasSubscribers) ch.publish(message);
}

/** Publishes a warning; false when nobody listens (so a caller may say it again later). */
export function warn(event: WarningEvent): boolean {
  if (!channels.warning.hasSubscribers) return false;
  channels.warning.publish(event);
  return true;
}
