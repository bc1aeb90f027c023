/**
 * Helpers of the client adapter (client.ts): mkdirp, and two repairs to node-zookeeper-client's
 * ConnectionManager, made once per client (leasehold's own and a caller's), which only change
 * what happens on a new connection:
 *
 * - The unparsed tail of a packet was kept across connections: the first reply on a new socket
 *   was then parsed after stale bytes ("Unknown code", thrown from its socket handler, which ends
 *   the process). Each new connection starts with an empty buffer.
 * - Its connect timer stops at the TCP connect and none runs until the handshake's reply: a
 *   server that accepts connections and never answers (a member still loading after a restart,
 *   a black hole) left the client CONNECTING forever, the backend dead for good. As the Java
 *   client does (ClientCnxn: sessionTimeout / number of hosts while connecting), a socket whose
 *   handshake has not been answered within the client's connect timeout is destroyed, and the
 *   client goes on to the next server.
 */
import { BackendError } from '../../errors.js';
import { NO_NODE, NODE_EXISTS, PERSISTENT, zkCode } from './protocol.js';

const MENDED = Symbol('leasehold: connections mended');
/** ConnectionManager's STATES.CONNECTING: the handshake has not been answered. */
const CONNECTING = 1;

interface SocketLike {
  destroy(): void;
  once(event: 'close', fn: () => void): unknown;
}

export function mendConnections(cm: any): void {
  if (!cm || cm[MENDED]) return;
  if (typeof cm.connect === 'function') {
    const connect = cm.connect;
    cm.connect = function (this: { pendingBuffer: unknown }, ...args: unknown[]) {
      this.pendingBuffer = null;
      return connect.apply(this, args);
    };
  }
  if (typeof cm.onSocketConnected === 'function') {
    const onConnected = cm.onSocketConnected;
    // looked up (and bound) by connect() for each new socket
    cm.onSocketConnected = function (this: any, ...args: unknown[]) {
      boundHandshake(this, this.socket as SocketLike | null);
      return onConnected.apply(this, args);
    };
  }
  cm[MENDED] = true;
}

function boundHandshake(cm: any, sock: SocketLike | null): void {
  if (!sock || typeof sock.destroy !== 'function') return;
  // sessionTimeout / number of servers (the requested timeout until one was agreed)
  const ms = Number(cm.connectTimeout) > 0 ? Number(cm.connectTimeout) : 10_000;
  const t = setTimeout(() => {
    if (cm.socket !== sock || cm.state !== CONNECTING) return;
    try {
      sock.destroy(); // the client sees the close and connects to the next server
    } catch {
      /* already closed */
    }
  }, ms);
  t.unref();
  sock.once('close', () => clearTimeout(t));
}

/** Creates `path` and its missing parents as persistent nodes (NODE_EXISTS is fine). */
export async function mkdirp(
  zk: { create(path: string, data: Buffer | null, mode: number): Promise<string> },
  path: string,
  chroot: unknown,
): Promise<void> {
  const parts = path.split('/').filter(Boolean);
  let at = '';
  for (const p of parts) {
    at += `/${p}`;
    try {
      await zk.create(at, null, PERSISTENT);
    } catch (e) {
      const code = zkCode(e);
      // the top of the tree has no parent but the client's chroot: that one is missing
      if (code === NO_NODE && at === `/${parts[0]}`) {
        throw new BackendError(
          `zookeeper: the client's chroot ${typeof chroot === 'string' ? `"${chroot}" ` : ''}does not exist: create it, or give the chroot to connectZookeeper or zk://, which create it`,
        );
      }
      if (code !== NODE_EXISTS) throw e;
    }
  }
}

/**
 * Destroys the client's socket if it is still open (after close(): the client keeps it until the
 * server answers the goodbye, which a frozen server never does, and it keeps the process alive).
 */
export function dropSocket(cm: any): void {
  const sock = cm?.socket as { destroyed?: boolean; destroy?: () => void } | undefined;
  if (!sock || sock.destroyed) return;
  try {
    sock.destroy?.();
  } catch {
    /* already closed */
  }
}
