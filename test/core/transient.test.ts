/**
 * Which failures a waiting acquire retries (src/transient.ts): the shapes the supported clients
 * give a failure that may pass by itself, and some that would fail every later attempt too.
 * The real servers' errors are met in test/redis/freeze.test.ts (a redis-server killed during a
 * wait) and test/etcd/failover.test.ts (a waiter's lease revoked).
 */
import { describe, expect, test } from 'vitest';
import { BackendError, ClosedError, InvalidArgumentError, LockTimeoutError, QuorumError } from '../../src/index.js';
import { isTransient, markTransient } from '../../src/transient.js';

const client = (message: string, fields: Record<string, unknown> = {}, name?: string) => {
  const e = Object.assign(new Error(message), fields);
  if (name) Object.defineProperty(e, 'name', { value: name });
  return e;
};
/** As the engine wraps a client's error (src/calls.ts). */
const wrapped = (cause: unknown) => new BackendError(`redis: acquire of "k" failed: ${String(cause)}`, { cause });

describe('isTransient', () => {
  test.each([
    ['a refused connection', client('connect ECONNREFUSED 127.0.0.1:6379', { code: 'ECONNREFUSED' })],
    ['a reset connection', client('read ECONNRESET', { code: 'ECONNRESET' })],
    [
      "Node's AggregateError of a refused dual-stack connect",
      new AggregateError([client('connect ECONNREFUSED ::1:6379', { code: 'ECONNREFUSED' })], ''),
    ],
    ['ioredis: Connection is closed', client('Connection is closed.')],
    [
      'ioredis: max retries',
      client('Reached the max retries per request limit (which is 20).', {}, 'MaxRetriesPerRequestError'),
    ],
    ['Redis loading its data', client('LOADING Redis is loading the dataset in memory', {}, 'ReplyError')],
    ['a replica promoted away', client("READONLY You can't write against a read only replica.", {}, 'ReplyError')],
    ['a slot migrating', client('TRYAGAIN Multiple keys request during rehashing of slot', {}, 'ReplyError')],
    ['node-redis: socket closed', client('Socket closed unexpectedly', {}, 'SocketClosedUnexpectedlyError')],
    ['pg: connection terminated', client('Connection terminated unexpectedly')],
    [
      'Postgres shutting down (57P01)',
      client('terminating connection due to administrator command', { code: '57P01' }),
    ],
    ['Postgres starting (57P03)', client('the database system is starting up', { code: '57P03' })],
    ['Postgres connection failure (08006)', client('connection failure', { code: '08006' })],
    ['postgres.js: CONNECTION_CLOSED', client('write CONNECTION_CLOSED 127.0.0.1:5432', { code: 'CONNECTION_CLOSED' })],
    ['SQLite busy', client('database is locked', { code: 'SQLITE_BUSY' })],
    ['SQLite busy (extended code)', client('database is locked', { code: 'SQLITE_BUSY_SNAPSHOT' })],
    ['etcd unavailable', client('14 UNAVAILABLE: No connection established', {}, 'GRPCUnavailableError')],
    ['ZooKeeper connection loss', client('Exception: CONNECTION_LOSS[-4]')],
  ])('%s, wrapped in a BackendError: retried', (_, cause) => {
    expect(isTransient(wrapped(cause))).toBe(true);
  });

  test.each([
    ['SQLite read-only', client('attempt to write a readonly database', { code: 'SQLITE_READONLY' })],
    ['SQLite not a database', client('file is not a database', { code: 'SQLITE_NOTADB' })],
    ['Postgres permission denied (42501)', client('permission denied for schema pg_catalog', { code: '42501' })],
    ['Postgres bad input (22021)', client('invalid byte sequence for encoding "UTF8": 0x00', { code: '22021' })],
    ['Redis ACL', client('NOPERM this user has no permissions to run the evalsha command', {}, 'ReplyError')],
    ['Redis wrong type', client('WRONGTYPE Operation against a key holding the wrong kind of value', {}, 'ReplyError')],
    ['a bug', new TypeError("Cannot read properties of undefined (reading 'x')")],
  ])('%s: not retried', (_, cause) => {
    expect(isTransient(wrapped(cause))).toBe(false);
  });

  test("our own errors: a QuorumError and a marked BackendError are; the rest, and a key's text, are not", () => {
    expect(isTransient(new QuorumError('redlock: 3 of 5 nodes failed', []))).toBe(true);
    expect(isTransient(markTransient(new BackendError('redis: acquire of "k" did not answer within 5000ms')))).toBe(
      true,
    );
    // the message quotes a caller's key: it must not make a permanent failure look transient
    expect(isTransient(new BackendError('redis: acquire of "Connection is closed" failed: NOPERM'))).toBe(false);
    expect(isTransient(new ClosedError('closed'))).toBe(false);
    expect(isTransient(new InvalidArgumentError('bad'))).toBe(false);
    expect(isTransient(new LockTimeoutError('k', 5))).toBe(false);
    expect(isTransient(client('connect ECONNREFUSED', { code: 'ECONNREFUSED' }))).toBe(false); // not wrapped: not ours to judge
  });
});
