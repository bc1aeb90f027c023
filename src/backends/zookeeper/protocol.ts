/**
 * ZooKeeper's vocabulary as the backend uses it: error codes and create modes, a node's stat,
 * the ops of a multi, and a client's error as a BackendError that keeps its ZooKeeper code.
 */
import { BackendError, InvalidArgumentError } from '../../errors.js';
import { scrubError } from '../../scrub.js';

// ZooKeeper's error codes and create modes (stable across versions)
export const NO_NODE = -101;
export const BAD_VERSION = -103;
export const NODE_EXISTS = -110;
export const NOT_EMPTY = -111;
export const SESSION_EXPIRED = -112;
export const CONNECTION_LOSS = -4;
export const OPERATION_TIMEOUT = -7;
export const PERSISTENT = 0;
export const EPHEMERAL = 1;
export const EPHEMERAL_SEQUENTIAL = 3;

export interface ZkStat {
  czxid: bigint;
  mtime: number;
  version: number;
  numChildren: number;
  ephemeralOwner: bigint;
}

export type Op =
  | { op: 'create'; path: string; data: Buffer | null; mode: number }
  | { op: 'setData'; path: string; data: Buffer; version: number }
  | { op: 'check'; path: string; version?: number }
  | { op: 'remove'; path: string; version?: number };

/** The ZooKeeper error code of `e` (0 when it has none). */
export const codeOf = (e: unknown): number => {
  const c = (e as { code?: unknown } | null)?.code;
  if (typeof c === 'number') return c;
  const inner = (e as { cause?: unknown } | null)?.cause;
  return inner && inner !== e ? codeOf(inner) : 0;
};

/** A client error as a BackendError whose message names the operation (never data or tokens). */
export function zkError(e: unknown, op: string): Error {
  if (e instanceof BackendError || e instanceof InvalidArgumentError) return e;
  const cause = scrubError(e);
  const err = new BackendError(`zookeeper: ${op}: ${cause.message}`, { cause });
  (err as unknown as { zkCode: number }).zkCode = codeOf(e);
  return err;
}

/** The ZooKeeper code of an error from the session (kept beside the LeaseholdError code). */
export const zkCode = (e: unknown): number => (e as { zkCode?: number } | null)?.zkCode ?? codeOf(e);

const long = (b: unknown): bigint => {
  if (Buffer.isBuffer(b)) return b.length === 8 ? b.readBigInt64BE(0) : 0n;
  return typeof b === 'number' ? BigInt(b) : 0n;
};

export const statOf = (s: any): ZkStat => ({
  czxid: long(s?.czxid),
  mtime: Number(long(s?.mtime)),
  version: Number(s?.version ?? 0),
  numChildren: Number(s?.numChildren ?? 0),
  ephemeralOwner: long(s?.ephemeralOwner),
});
