/**
 * The clients fromUrl opens and owns (src/url.ts): loading a client package lazily (a missing one
 * named in the error), the "could not connect" error without the URL's password, closing a client
 * within a bound, a backend whose close() also closes its client, and a connected Redis client
 * (ioredis or node-redis) for one redis:// URL.
 */
import type { Backend } from './backend.js';
import { BackendError, LeaseholdError } from './errors.js';
import { redactText, redactUrl, scrubError, secretsOfUrl } from './scrub.js';
import { race } from './wait.js';

/** How long closing a client that fromUrl made may take before its socket is dropped. */
const CLIENT_CLOSE_MS = 2000;

/** "could not connect": the message and the cause without the URL's password. */
export function connectError(safe: string, url: string, e: unknown): BackendError {
  const secrets = secretsOfUrl(url);
  const cause = scrubError(e, secrets);
  return new BackendError(`could not connect to ${safe}: ${redactText(cause.message, secrets)}`, { cause });
}

/** Closes a client politely, or drops it after CLIENT_CLOSE_MS (a frozen server never answers QUIT). */
export async function closeWithin(polite: () => Promise<unknown>, drop: () => unknown): Promise<void> {
  let p: Promise<unknown>;
  try {
    p = Promise.resolve(polite());
  } catch (e) {
    p = Promise.reject(e);
  }
  await race(p, { ms: CLIENT_CLOSE_MS }).catch(() => {
    try {
      drop();
    } catch {
      // already gone
    }
  });
}

export async function load(names: readonly string[], forUrl: string): Promise<{ name: string; mod: any }> {
  for (const name of names) {
    try {
      return { name, mod: await import(name) };
    } catch (e) {
      if (
        (e as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND' &&
        (e as { code?: string }).code !== 'MODULE_NOT_FOUND'
      )
        throw e;
    }
  }
  throw new LeaseholdError(
    'LEASEHOLD_MISSING_PEER',
    `fromUrl("${forUrl}") needs the ${names.join(' or ')} package: npm install ${names[0]}`,
  );
}

/** The longest a fromUrl backend's own `close()` may keep its client open. */
const BACKEND_CLOSE_MS = 15_000;

/**
 * Wraps `close()` so it also closes the client the backend was built with: once the backend's
 * close settled, or after BACKEND_CLOSE_MS if it has not (a server out of reach must not keep
 * the client, and the process, alive; the backend's close finishes on its own).
 */
export function owning<B extends Backend>(backend: B, closeClient: () => Promise<unknown>): B {
  const closeBackend = backend.close.bind(backend);
  backend.close = async () => {
    try {
      await race(Promise.resolve().then(closeBackend), { ms: BACKEND_CLOSE_MS, onTimeout: () => TIMED_OUT }).catch(
        (e: unknown) => {
          if (e !== TIMED_OUT) throw e;
        },
      );
    } finally {
      await closeClient().catch(() => {});
    }
  };
  return backend;
}
const TIMED_OUT = Symbol('timed out');

export interface RedisClient {
  client: any;
  close: () => Promise<unknown>;
  /** Why it did not connect, when kept anyway (`keepIfDown`): an ioredis client reconnects on its own. */
  down?: BackendError;
}

/**
 * A client of `url`, connected; with `keepIfDown` (a Redlock node: a minority may be down) an
 * ioredis client that could not connect is returned with `down` set rather than closed, and
 * rejoins when its node answers. node-redis is not kept: its commands fail at once until connected.
 */
/** How long opening one redis:// client may take, handshake included (as for Cluster and Sentinel). */
const CONNECT_MS = 5000;

export async function redisClient(url: string, keepIfDown = false): Promise<RedisClient> {
  const safe = redactUrl(url);
  const { name, mod } = await load(['ioredis', 'redis'], safe);
  if (name === 'ioredis') {
    const Redis = mod.Redis ?? mod.default;
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 2, connectTimeout: 5000 });
    client.on('error', () => {}); // reconnects on its own; each command reports its own failure
    // ioredis rejects connect() with "Connection is closed."; the socket's error (ECONNREFUSED, ...) is an event
    let socketError: unknown;
    const onError = (e: unknown) => (socketError ??= e);
    client.on('error', onError);
    const close = () =>
      closeWithin(
        () => client.quit(),
        () => client.disconnect(),
      );
    try {
      // connectTimeout bounds the TCP connect only: a server that accepts and never answers the
      // ready check (or AUTH) would keep connect() pending forever
      await race(client.connect(), { ms: CONNECT_MS, onTimeout: () => new Error(`no answer within ${CONNECT_MS}ms`) });
    } catch (e) {
      const err = connectError(safe, url, socketError ?? e);
      if (keepIfDown) {
        // QUIT would wait in the offline queue of a node that never came back
        const closeDown = async () => (client.status === 'ready' ? close() : client.disconnect());
        return { client, close: closeDown, down: err };
      }
      client.disconnect();
      throw err;
    } finally {
      client.off('error', onError);
    }
    return { client, close };
  }
  // node-redis retries a first connect forever by default (a refused connection, a database the
  // server does not have): connect() would never settle. Until it is ready a failure ends it;
  // after that a lost connection is retried as node-redis does by default
  let ready = false;
  const reconnectStrategy = (retries: number, cause: unknown) =>
    ready ? Math.min(retries * 50, 500) : cause instanceof Error ? cause : new Error(String(cause));
  const client = mod.createClient({ url, socket: { connectTimeout: 5000, reconnectStrategy } });
  client.on('error', () => {});
  client.on('ready', () => (ready = true));
  try {
    // and a server that accepts the socket but never answers the handshake
    await race(client.connect(), { ms: CONNECT_MS, onTimeout: () => new Error(`no answer within ${CONNECT_MS}ms`) });
  } catch (e) {
    await Promise.resolve(client.destroy?.()).catch(() => {});
    throw connectError(safe, url, e);
  }
  const polite = () => (client.close ? client.close() : client.quit());
  return { client, close: () => closeWithin(polite, () => (client.destroy ? client.destroy() : client.disconnect())) };
}
