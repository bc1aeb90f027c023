/**
 * Instrumentation through node:diagnostics_channel. The library never logs; subscribe with
 * `diagnostics_channel.subscribe('leasehold:acquire', fn)`. Messages never carry a token.
 */
import diagnostics from 'node:diagnostics_channel';

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

export const channels = {
  acquire: diagnostics.channel('leasehold:acquire'),
  release: diagnostics.channel('leasehold:release'),
  extend: diagnostics.channel('leasehold:extend'),
  lost: diagnostics.channel('leasehold:lost'),
  wait: diagnostics.channel('leasehold:wait'),
};

export function emit(channel: diagnostics.Channel, message: object): void {
  if (channel.hasSubscribers) channel.publish(message);
}
