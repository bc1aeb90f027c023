/** The postgres.js (porsager) adapter: `sql`, its reserved connections, `sql.listen`. */
import { inspect } from 'node:util';
import { BackendError, InvalidArgumentError } from '../../errors.js';
import {
  backendError,
  Closable,
  noop,
  timed,
  type Conn,
  type Db,
  type ListenHandlers,
  type Params,
  type Queryable,
  type Row,
  type Subscription,
} from './client.js';
import { markTransient } from '../../transient.js';

/**
 * postgres.js has no per-connection close event and crashes (a TypeError in a timer) if a
 * reserved connection is used after the server closed it. So each reserved connection is
 * identified when its first query is sent (the `onexecute` query option, the hook `sql.begin`
 * uses) and the public `onclose(connectionId)` option is chained to learn when it closes.
 * `sql.end()` waits for reserved connections but never ends one released after it began, so
 * `end`/`close` are observed too: a connection given back after that is terminated instead.
 */
interface SqlState {
  readonly hooks: Map<number, (cause: unknown) => void>;
  ending: boolean;
}
const sqlStates = new WeakMap<object, SqlState>();

function sqlState(sql: any): SqlState {
  const options = sql.options;
  let state = sqlStates.get(options);
  if (!state) {
    const st: SqlState = { hooks: new Map(), ending: false };
    const previous = options.onclose;
    options.onclose = function (this: unknown, id: number, ...rest: unknown[]) {
      const hook = st.hooks.get(id);
      if (hook) {
        st.hooks.delete(id);
        hook(markTransient(new BackendError('postgres: connection closed')));
      }
      if (typeof previous === 'function') return previous.call(this, id, ...rest);
    };
    for (const name of ['end', 'close'] as const) {
      const original = sql[name];
      if (typeof original !== 'function') continue;
      sql[name] = function (this: unknown, ...args: unknown[]) {
        st.ending = true;
        return original.apply(this, args);
      };
    }
    sqlStates.set(options, st);
    state = st;
  }
  return state;
}

export class PostgresJsDb implements Db {
  /** Neither the pool nor its options (a password) print, at any depth. */
  [inspect.custom](): string {
    return 'PostgresJsDb { postgres.js }';
  }
  toJSON(): { kind: string } {
    return { kind: this.kind };
  }

  readonly kind = 'postgres.js' as const;
  private readonly state: SqlState;
  constructor(private readonly sql: any) {
    if (!sql.options || typeof sql.options !== 'object') {
      throw new InvalidArgumentError('postgres(): this postgres.js version exposes no sql.options (need postgres@3)');
    }
    this.state = sqlState(sql);
  }

  async query(text: string, params: Params = []): Promise<Row[]> {
    return [...(await this.sql.unsafe(text, params))];
  }

  async reserve(timeoutMs: number): Promise<Conn> {
    const reserved = await timed<any>(this.sql.reserve(), timeoutMs, 'pool checkout', (r) => r.release());
    let conn: PostgresJsConn | null = null;
    const onexecute = (c: any) => {
      if (!conn && c && typeof c.id === 'number' && typeof c.terminate === 'function') {
        conn = new PostgresJsConn(reserved, c, this.state);
      }
      return true;
    };
    // Sent now and not awaited: the caller's next statement is pipelined behind it (one round trip).
    const query = reserved.unsafe('select pg_backend_pid() as pid', [], { onexecute });
    const answered = timed<Row[]>(Promise.resolve(query.execute()), timeoutMs, 'connect');
    for (let i = 0; i < 4 && !conn; i++) await Promise.resolve(); // postgres.js sends it a microtask later
    if (!conn) {
      try {
        await answered;
      } catch (e) {
        const c = conn as PostgresJsConn | null;
        if (c) c.destroy(e);
        throw backendError(e, 'connect');
      }
    }
    const c = conn as PostgresJsConn | null;
    if (!c) {
      reserved.release();
      throw new BackendError(
        'postgres: unsupported postgres.js version (cannot track reserved connections; need postgres@3.4)',
      );
    }
    answered.then(
      (rows) => (c.pid = Number(rows[0]?.pid)),
      () => {}, // the statement pipelined behind it fails too, and is handled there
    );
    return c;
  }

  async listen(channel: string, h: ListenHandlers, timeoutMs: number): Promise<Subscription> {
    let first = true;
    const sub = await timed<any>(
      this.sql.listen(
        channel,
        (payload: string) => h.message(payload),
        () => {
          if (!first) h.reset(false); // re-listened after a reconnect: messages may have been missed
          first = false;
        },
      ),
      timeoutMs,
      'LISTEN',
      (late) => void late.unlisten().catch(noop),
    );
    return {
      close: async () => void (await timed(Promise.resolve(sub.unlisten()), timeoutMs, 'UNLISTEN').catch(noop)),
    };
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    return this.sql.begin((tx: any) =>
      fn({ query: async (text, params = []) => [...(await tx.unsafe(text, params))] }),
    );
  }
}

class PostgresJsConn extends Closable implements Conn {
  pid = 0;
  /** The pid the connection's BackendKeyData announced (postgres.js's `result.state`). */
  keyPid: number | undefined;
  private done = false;

  constructor(
    private readonly reserved: any,
    private readonly connection: any,
    private readonly state: SqlState,
  ) {
    super();
    state.hooks.set(connection.id, this.hook);
  }

  private readonly hook = (cause: unknown) => this.fail(cause);

  async query(text: string, params: Params = []): Promise<Row[]> {
    if (this.closed) throw this.cause ?? new BackendError('postgres: connection closed');
    const result = await this.reserved.unsafe(text, params);
    const keyPid = result?.state?.pid;
    if (keyPid != null) this.keyPid = Number(keyPid);
    return [...result];
  }

  async prepared(text: string, params: Params = []): Promise<Row[]> {
    if (this.closed) throw this.cause ?? new BackendError('postgres: connection closed');
    return [...(await this.reserved.unsafe(text, params, { prepare: true }))];
  }

  release(): void {
    if (this.done) return;
    this.done = true;
    this.unhook();
    // A closed connection is already back in postgres.js's pool; releasing it again would corrupt it.
    if (this.closed) return;
    if (this.state.ending) this.connection.terminate();
    else this.reserved.release();
  }

  destroy(cause?: unknown): void {
    if (this.done) return;
    this.done = true;
    this.unhook();
    if (!this.closed) {
      this.closed = true;
      this.cause = cause;
      this.connection.terminate(); // fails pending queries, sends Terminate; the pool reconnects the slot later
    }
    this.cbs = [];
  }

  private unhook(): void {
    // only our own hook: after a close the slot may already serve (and be hooked by) someone else
    if (this.state.hooks.get(this.connection.id) === this.hook) this.state.hooks.delete(this.connection.id);
  }
}
