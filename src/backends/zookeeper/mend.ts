/**
 * Two repairs to node-zookeeper-client's ConnectionManager, made once per client (leasehold's
 * own and a caller's): both only change what happens on a new connection.
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
