/**
 * A small promise adapter over node-zookeeper-client, with session states the way Curator has
 * them: CONNECTED, SUSPENDED (the connection dropped; the session may live on), RECONNECTED
 * (the same session is back), LOST (the server expired the session, or SUSPENDED lasted longer
 * than the session timeout: this client never hears of an expiry while it cannot reach a
 * server, so the adapter times it). Everything the backend needs from a client goes through
 * `ZkSession`, so a second client package could be adapted later.
 */
import { inspect } from 'node:util';
import { publish, type SessionState } from './events.js';
import type { ZookeeperClientLike } from './clientlike.js';
import { Cutoff, cutOffError } from './cutoff.js';
import { dropSocket, mendConnections, mkdirp } from './mend.js';
import { CONNECTION_LOSS, SESSION_EXPIRED, statOf, zkCode, zkError, type Op, type ZkStat } from './protocol.js';

export { isZookeeperClient, type ZookeeperClientLike } from './clientlike.js';

type Listener = (state: SessionState, session: string) => void;

/**
 * One ZooKeeper session as the backend sees it. With a `factory` (a client leasehold made
 * itself, as fromUrl does) a LOST session is replaced by a new client; with a user's client it
 * stays LOST (every call then fails) until the user makes a new backend.
 */
export class ZkSession {
  private client: any;
  private current: SessionState | null = null;
  private sessionHex = '';
  private lostTimer: NodeJS.Timeout | null = null;
  private readonly listeners = new Set<Listener>();
  private waiters: Array<{ resolve: () => void; reject: (e: unknown) => void }> = [];
  private closed = false;
  private closing = false;
  /** Gives up a server out of reach once close() began (our own client only: cutoff.ts). */
  private readonly cutoff = new Cutoff({
    connected: () => {
      if (!this.isConnected) return false;
      this.hookSocket();
      return true;
    },
    lastHeard: () => this.lastHeard,
    onCut: () => this.rejectWaiters('closing: the server is out of reach'),
  });
  /** A session of the current client has connected: its timeout is the one the server agreed. */
  private agreed = false;
  /** The session timeout to assume before the server negotiated one. */
  private readonly requestedTimeoutMs: number;
  /** When the server last sent us anything (monotonic ms), and the socket we listen on. */
  private lastHeard = 0;
  private heardOn: unknown = null;
  private readonly watchdog: NodeJS.Timeout;

  constructor(
    client: ZookeeperClientLike,
    private readonly factory: (() => ZookeeperClientLike) | null,
    requestedTimeoutMs: number,
  ) {
    this.requestedTimeoutMs = requestedTimeoutMs;
    this.attach(client);
    // node-zookeeper-client has no read timeout: a frozen or black-holed server would keep us
    // CONNECTED forever. As the Java client does, a connection silent for 2/3 of the session
    // timeout (pings go out every 1/3) is dropped, so the client fails over or reports SUSPENDED.
    // (A connection whose handshake is never answered is bounded in mend.ts.)
    this.watchdog = setInterval(() => this.checkHeard(), Math.max(50, Math.floor(requestedTimeoutMs / 6)));
    this.watchdog.unref();
  }

  private hookSocket(): void {
    const sock = this.client?.connectionManager?.socket;
    if (!sock || sock === this.heardOn || typeof sock.on !== 'function') return;
    this.heardOn = sock;
    this.lastHeard = performance.now();
    sock.on('data', () => {
      if (this.heardOn === sock) this.lastHeard = performance.now();
    });
  }

  private checkHeard(): void {
    if (this.closed || (this.current !== 'CONNECTED' && this.current !== 'RECONNECTED')) return;
    this.hookSocket();
    const sock = this.heardOn as { destroy?: () => void } | null;
    if (sock && performance.now() - this.lastHeard > (this.sessionTimeoutMs * 2) / 3) {
      this.heardOn = null;
      try {
        sock.destroy?.(); // the client sees the close, reports DISCONNECTED and reconnects
      } catch {
        /* already closed */
      }
    }
  }

  get state(): SessionState | null {
    return this.current;
  }
  /** The current session's id in hex ('' before the first connection). */
  get session(): string {
    return this.sessionHex;
  }
  /**
   * The client reports the timeout it asked for until a session connects; only then is
   * `sessionTimeoutMs` the one the server agreed to (it may be shorter: maxSessionTimeout).
   */
  get timeoutAgreed(): boolean {
    return this.agreed;
  }
  get sessionTimeoutMs(): number {
    const t = Number(this.client?.getSessionTimeout?.());
    return Number.isFinite(t) && t > 0 ? t : this.requestedTimeoutMs;
  }
  get usable(): boolean {
    return !this.closed && this.current !== 'LOST';
  }

  onState(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private attach(client: ZookeeperClientLike): void {
    const c = client as any;
    this.client = c;
    this.agreed = false;
    mendConnections(c.connectionManager);
    c.on('state', (s: { name?: string; getName?: () => string }) => {
      if (this.client !== c) return;
      const name = String(s?.name ?? s?.getName?.() ?? s);
      if (this.closed) return this.afterClose(name);
      if (name === 'SYNC_CONNECTED' || name === 'CONNECTED_READ_ONLY') this.connected();
      else if (name === 'DISCONNECTED') this.suspended();
      else if (name === 'EXPIRED' || name === 'AUTH_FAILED') this.lost();
    });
    const st = c.getState?.();
    if (st && String(st.name ?? st) === 'SYNC_CONNECTED') this.connected();
  }

  private readSession(): string {
    try {
      const id = this.client.getSessionId();
      return Buffer.isBuffer(id) ? id.toString('hex') : String(id ?? '');
    } catch {
      return '';
    }
  }

  private set(state: SessionState): void {
    this.current = state;
    publish({ backend: 'zookeeper', type: state, session: this.sessionHex });
    for (const fn of [...this.listeners]) fn(state, this.sessionHex);
  }

  private connected(): void {
    if (this.lostTimer) clearTimeout(this.lostTimer);
    this.lostTimer = null;
    this.agreed = true;
    this.hookSocket();
    const id = this.readSession();
    const same = id !== '' && id === this.sessionHex;
    const was = this.current;
    this.sessionHex = id;
    // the same session back after SUSPENDED (or after a LOST the adapter declared by its timer)
    if (same && (was === 'SUSPENDED' || was === 'LOST')) this.set('RECONNECTED');
    else if (!same || was === null) this.set('CONNECTED');
    const w = this.waiters;
    this.waiters = [];
    for (const x of w) x.resolve();
  }

  private suspended(): void {
    if (this.current !== 'CONNECTED' && this.current !== 'RECONNECTED') return;
    this.set('SUSPENDED');
    // the client hears nothing of an expiry while it cannot reach a server: time it here
    const ms = this.sessionTimeoutMs;
    this.lostTimer = setTimeout(() => {
      this.lostTimer = null;
      if (this.current === 'SUSPENDED') this.lost();
    }, ms);
    this.lostTimer.unref();
  }

  private lost(): void {
    if (this.lostTimer) clearTimeout(this.lostTimer);
    this.lostTimer = null;
    const expired = this.client?.getState?.()?.name === 'EXPIRED';
    if (this.current !== 'LOST') this.set('LOST');
    if (this.closed) return;
    // who waits for the connection gives up, also on a LOST the adapter declared by its timer
    this.rejectWaiters(expired ? 'session expired' : 'session lost: no server answered within the session timeout');
    if (expired || this.client?.getState?.()?.name === 'AUTH_FAILED') {
      if (this.factory && !this.closing) {
        // a client of our own: a new session replaces the expired one (not once close() began)
        try {
          this.client.close();
        } catch {
          /* already closed */
        }
        const next = this.factory();
        this.attach(next);
        (next as any).connect();
      }
    }
  }

  private rejectWaiters(why: string): void {
    const w = this.waiters;
    this.waiters = [];
    const e = zkError(Object.assign(new Error(why), { code: SESSION_EXPIRED }), 'session');
    for (const x of w) x.reject(e);
  }

  /**
   * After close() a caller's client lives on: node deletions still under way (close bounds its
   * wait for them) go on once it reconnects, and give up when its session ends.
   */
  private afterClose(name: string): void {
    if (name === 'SYNC_CONNECTED' || name === 'CONNECTED_READ_ONLY') {
      const w = this.waiters;
      this.waiters = [];
      for (const x of w) x.resolve();
    } else if (name === 'EXPIRED' || name === 'AUTH_FAILED') this.rejectWaiters('session expired');
  }

  get isConnected(): boolean {
    return this.current === 'CONNECTED' || this.current === 'RECONNECTED';
  }

  /** close() began on leasehold's own client: its session ends with it, and its nodes. */
  get ending(): boolean {
    return this.closing && this.factory !== null;
  }

  /**
   * close() begins: nothing more is sent but the deletions of our nodes (see `ending`). On our own
   * client a server out of reach is no longer waited for (cutoff.ts): the session ends with
   * close(), its nodes with it.
   */
  beginClose(): void {
    if (this.closing) return;
    this.closing = true;
    if (this.factory && !this.closed) this.cutoff.start();
  }

  /** Resolves when the connection is down (at once if it is not up). */
  untilDisconnected(): Promise<void> {
    if (this.closed || !this.isConnected) return Promise.resolve();
    return new Promise((resolve) => {
      const off = this.onState((s) => {
        if (s !== 'SUSPENDED' && s !== 'LOST') return;
        off();
        resolve();
      });
    });
  }

  /**
   * Resolves once connected (at once if connected); rejects when the session is gone, or
   * leasehold's own client is closed (a caller's client may still reconnect: see afterClose).
   */
  whenConnected(): Promise<void> {
    if ((this.closed || this.cutoff.cut) && this.factory)
      return Promise.reject(zkError(new Error('closed'), 'session'));
    if (this.current === 'CONNECTED' || this.current === 'RECONNECTED') return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  private call<T>(
    op: string,
    fn: (cb: (e: unknown, ...r: any[]) => void) => void,
    map: (...r: any[]) => T,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      // our own client's calls are tracked, so a close() that finds the server gone fails them
      const fail = this.factory ? (e: unknown) => reject(zkError(e, op)) : null;
      if (fail && !this.cutoff.track(fail)) return fail(cutOffError());
      try {
        fn((e, ...r) => {
          if (fail) this.cutoff.untrack(fail);
          if (e) reject(zkError(e, op));
          else resolve(map(...r));
        });
      } catch (e) {
        if (fail) this.cutoff.untrack(fail);
        reject(zkError(e, op));
      }
    });
  }

  create(path: string, data: Buffer | null, mode: number): Promise<string> {
    return this.call(
      'create',
      (cb) => this.client.create(path, data ?? undefined, mode, cb),
      (p: string) => p,
    );
  }
  remove(path: string, version = -1): Promise<void> {
    return this.call(
      'remove',
      (cb) => this.client.remove(path, version, cb),
      () => undefined,
    );
  }
  /**
   * A read, retried after a reconnect when the connection was lost under it (a read has no
   * effect to lose; the engine bounds the whole call): a blip does not fail an acquire.
   */
  private async read<T>(
    op: string,
    fn: (cb: (e: unknown, ...r: any[]) => void) => void,
    map: (...r: any[]) => T,
  ): Promise<T> {
    for (let i = 0; ; i++) {
      try {
        return await this.call(op, fn, map);
      } catch (e) {
        if (zkCode(e) !== CONNECTION_LOSS || i >= 3 || this.closed || this.cutoff.cut) throw e;
        await this.whenConnected().catch(() => Promise.reject(e));
      }
    }
  }
  getData(path: string, watcher?: () => void): Promise<{ data: Buffer | null; stat: ZkStat }> {
    return this.read(
      'getData',
      (cb) => (watcher ? this.client.getData(path, watcher, cb) : this.client.getData(path, cb)),
      (data: Buffer | null, stat: unknown) => ({ data: data ?? null, stat: statOf(stat) }),
    );
  }
  getChildren(path: string, watcher?: () => void): Promise<{ children: string[]; stat: ZkStat }> {
    return this.read(
      'getChildren',
      (cb) => (watcher ? this.client.getChildren(path, watcher, cb) : this.client.getChildren(path, cb)),
      (children: string[], stat: unknown) => ({ children: children ?? [], stat: statOf(stat) }),
    );
  }
  exists(path: string, watcher?: () => void): Promise<ZkStat | null> {
    return this.read(
      'exists',
      (cb) => (watcher ? this.client.exists(path, watcher, cb) : this.client.exists(path, cb)),
      (stat: unknown) => (stat ? statOf(stat) : null),
    );
  }
  /** One atomic multi; rejects with the first failing op's code. */
  multi(ops: readonly Op[]): Promise<void> {
    return this.call(
      'multi',
      (cb) => {
        const t = this.client.transaction();
        for (const o of ops) {
          if (o.op === 'create') t.create(o.path, o.data ?? undefined, o.mode);
          else if (o.op === 'setData') t.setData(o.path, o.data, o.version);
          else if (o.op === 'check') t.check(o.path, o.version ?? -1);
          else t.remove(o.path, o.version ?? -1);
        }
        t.commit(cb);
      },
      () => undefined,
    );
  }

  /** Creates `path` and its missing parents as persistent nodes (NODE_EXISTS is fine). */
  mkdirp(path: string): Promise<void> {
    return mkdirp(this, path, this.client?.connectionManager?.chrootPath);
  }

  /**
   * Ends this session (our own client: resolves once the server closed it, at most `boundMs`
   * later, so its ephemeral nodes are gone) or only stops listening (a user's client).
   */
  async close(ownClient: boolean, boundMs = 2000): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.watchdog);
    this.cutoff.stop();
    if (this.lostTimer) clearTimeout(this.lostTimer);
    this.lostTimer = null;
    this.listeners.clear();
    if (!ownClient) return; // deletions under way finish on the caller's client (afterClose)
    const w = this.waiters;
    this.waiters = [];
    const e = zkError(new Error('backend closed'), 'session');
    for (const x of w) x.reject(e);
    const c = this.client;
    // a server that did not answer while we closed (cut) is not waited for to say goodbye
    const connected = (this.current === 'CONNECTED' || this.current === 'RECONNECTED') && !this.cutoff.cut;
    const ended = new Promise<void>((resolve) => {
      if (!connected) return resolve();
      const t = setTimeout(resolve, boundMs);
      t.unref();
      c.once('disconnected', () => (clearTimeout(t), resolve()));
    });
    try {
      c.close();
    } catch {
      /* already closed */
    }
    await ended;
    // the client closes its socket once the server answers the goodbye: a frozen server never
    // does, and the open socket would keep the process alive
    dropSocket(c.connectionManager);
  }

  [inspect.custom](): string {
    return `ZkSession { ${this.current ?? 'CONNECTING'} }`;
  }
  toJSON(): { state: string | null } {
    return { state: this.current };
  }
}
