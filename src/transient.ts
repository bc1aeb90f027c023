/**
 * Which failures a waiting acquire retries until its deadline (src/acquire.ts): those that may
 * pass by themselves soon — a refused or dropped connection, a call past its bound, a server
 * restarting or failing over, a busy database. Anything else (a read-only SQLite file, a
 * permission the server refuses, a script error, a bug) fails the acquire at once, as it would
 * fail every later attempt too: retrying it would only turn a clear error into a long wait.
 *
 * An allow-list, by the shapes the supported clients give their errors: a failure it does not
 * know is not retried (fails fast, as before), never retried forever by mistake.
 */
import { LeaseholdError, QuorumError } from './errors.js';

/** Errors leasehold itself made and knows to be transient (a call past its bound, ...). */
const marked = new WeakSet<object>();

/** Marks an error of ours as transient (trying again soon may succeed); returns it. */
export function markTransient<E extends Error>(e: E): E {
  marked.add(e);
  return e;
}

/** Node's socket and DNS errors, postgres.js's connection codes, SQLite's busy/locked. */
const CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTCONN',
  'EAI_AGAIN',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'SQLITE_BUSY',
  'SQLITE_LOCKED',
]);

/**
 * PostgreSQL SQLSTATEs: connection exceptions (class 08), the server shutting down or starting
 * (57P01–57P03), serialization failure and deadlock (40001, 40P01), too many connections (53300).
 */
const SQLSTATE = /^(08[0-9A-Z]{3}|57P0[123]|40001|40P01|53300)$/;

/** Redis replies of a server that is loading, failing over or migrating a slot. */
const REDIS_REPLY = /^(LOADING|READONLY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|MOVED|ASK|NOREPLICAS|BUSY)\b/;

/** ZooKeeper (node-zookeeper-client: `Exception: CONNECTION_LOSS[-4]`). */
const ZOOKEEPER = /\b(CONNECTION_LOSS|OPERATION_TIMEOUT|SESSION_EXPIRED|SESSION_MOVED)\[-\d+\]/;

/** Clients' own words for a connection that is gone or not there yet. */
const CLIENT_MESSAGE = new RegExp(
  [
    'Connection is closed', // ioredis
    "Stream isn't writeable", // ioredis, offline queue off
    'Reached the max retries per request limit', // ioredis
    'Too many Cluster redirections', // ioredis Cluster
    'Failed to refresh slots cache', // ioredis Cluster
    'None of the sentinels are available', // ioredis Sentinel
    'Socket closed unexpectedly', // node-redis
    'Connection timeout', // node-redis
    'Connection terminated', // pg
    'timeout exceeded when trying to connect', // pg Pool
    'Client network socket disconnected', // Node tls
    'socket hang up',
  ]
    .map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('|'),
  'i',
);

/**
 * gRPC (etcd3's error classes): the server unavailable or the deadline passed; and etcd3's open
 * circuit breaker (cockatiel's BrokenCircuitError: a member that failed 3 calls in a row, with
 * UNAVAILABLE and the like, is not called again for 5 s). etcd3 leaves their `name` at "Error":
 * the class name is what the scrubbed copy of src/scrub.ts carries.
 */
const GRPC_NAME = /^(GRPC(Unavailable|DeadlineExceeded|ConnectFailed)Error|BrokenCircuitError)$/;

function known(e: Error): boolean {
  if (marked.has(e)) return true;
  // our own errors are known by their mark alone: their text may quote a caller's key
  if (e instanceof LeaseholdError) return false;
  const { code } = e as { code?: unknown };
  if (typeof code === 'string' && (CODES.has(code) || code.startsWith('SQLITE_BUSY') || SQLSTATE.test(code)))
    return true;
  const { message, name } = e;
  if (typeof message !== 'string') return false;
  return REDIS_REPLY.test(message) || ZOOKEEPER.test(message) || CLIENT_MESSAGE.test(message) || GRPC_NAME.test(name);
}

/**
 * True when trying again soon may succeed: a QuorumError, an error leasehold marked, or one whose
 * cause chain (or an AggregateError's errors) holds a known transient client error.
 */
export function isTransient(e: unknown): boolean {
  if (e instanceof QuorumError) return true;
  if (!(e instanceof LeaseholdError) || e.code !== 'LEASEHOLD_BACKEND') return false;
  const todo: unknown[] = [e];
  for (let i = 0; i < todo.length && i < 16; i++) {
    const x = todo[i];
    if (!(x instanceof Error)) continue;
    if (known(x)) return true;
    if (x.cause !== undefined) todo.push(x.cause);
    const errors = (x as { errors?: unknown }).errors;
    if (Array.isArray(errors)) todo.push(...errors);
  }
  return false;
}
