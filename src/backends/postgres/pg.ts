/** The `pg` adapter: a Pool, its checked-out clients, a LISTEN client. */
import { inspect } from 'node:util';
import { BackendError } from '../../errors.js';
import {
  backendError,
  Closable,
  noop,
  statementName,
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

export class PgDb implements Db {
  /** Neither the pool nor its options (a password) print, at any depth. */
  [inspect.custom](): string {
    return 'PgDb { pg }';
  }
  toJSON(): { kind: string } {
    return { kind: this.kind };
  }

  readonly kind = 'pg' as const;
  constructor(private readonly pool: any) {}

  async query(text: string, params: Params = []): Promise<Row[]> {
    return (await this.pool.query(text, params)).rows;
  }

  async reserve(timeoutMs: number): Promise<Conn> {
    const client = await timed<any>(this.pool.connect(), timeoutMs, 'pool checkout', (c) => c.release());
    return new PgConn(client);
  }

  async listen(channel: string, h: ListenHandlers, timeoutMs: number): Promise<Subscription> {
    const client = await timed<any>(this.pool.connect(), timeoutMs, 'pool checkout', (c) => c.release());
    const quoted = `"${channel}"`;
    let alive = true;
    const onMessage = (m: { channel: string; payload?: string }) => {
      if (m.channel === channel) h.message(m.payload ?? '');
    };
    const detach = () => {
      client.removeListener('notification', onMessage);
      client.removeListener('error', onDown);
      client.removeListener('end', onDown);
    };
    const onDown = (e?: unknown) => {
      if (!alive) return;
      alive = false;
      detach();
      client.on('error', noop);
      client.release(e instanceof Error ? e : new Error('leasehold: listener connection ended'));
      h.reset(true);
    };
    client.on('notification', onMessage);
    client.on('error', onDown);
    client.on('end', onDown);
    try {
      await timed(client.query(`LISTEN ${quoted}`), timeoutMs, 'LISTEN');
    } catch (e) {
      onDown(e);
      throw backendError(e, 'LISTEN');
    }
    return {
      close: async () => {
        if (!alive) return;
        alive = false;
        try {
          await timed(client.query(`UNLISTEN ${quoted}`), timeoutMs, 'UNLISTEN');
          detach();
          client.release();
        } catch (e) {
          detach();
          client.on('error', noop);
          client.release(e instanceof Error ? e : new Error(String(e)));
        }
      },
    };
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    const tx: Queryable = { query: async (text, params = []) => (await client.query(text, params)).rows };
    try {
      await client.query('BEGIN');
      const out = await fn(tx);
      await client.query('COMMIT');
      client.release();
      return out;
    } catch (e) {
      try {
        await client.query('ROLLBACK');
        client.release();
      } catch (e2) {
        client.release(e2 instanceof Error ? e2 : new Error(String(e2)));
      }
      throw e;
    }
  }
}

class PgConn extends Closable implements Conn {
  readonly pid: number;
  readonly keyPid: number;
  private done = false;
  private readonly onError = (e: unknown) => this.fail(e);
  private readonly onEnd = () => this.fail(markTransient(new BackendError('postgres: connection ended')));

  constructor(private readonly client: any) {
    super();
    this.pid = Number(client.processID);
    this.keyPid = this.pid;
    client.on('error', this.onError);
    client.on('end', this.onEnd);
  }

  async query(text: string, params: Params = []): Promise<Row[]> {
    return (await this.client.query(text, params)).rows;
  }

  prepared(text: string, params: Params = []): Promise<Row[]> {
    const Query = this.client.constructor?.Query;
    // pg's own Query class (`Client.Query`): a query object it is handed runs as it is, where a
    // config object is first copied property by property and wrapped in a second promise (on the
    // path of every acquire and release: ~5 µs of client CPU per statement). Any other client
    // (pg-native, a wrapper) takes the config object.
    if (typeof Query !== 'function' || this.client.pipeline) {
      return this.client.query({ name: statementName(text), text, values: params }).then((r: any) => r.rows);
    }
    return new Promise<Row[]>((resolve, reject) => {
      const q = new Query(text, params);
      q.name = statementName(text);
      q.callback = (err: unknown, res: any) => (err ? reject(err) : resolve(res.rows));
      this.client.query(q);
    });
  }

  release(): void {
    if (this.done) return;
    if (this.closed) return this.destroy(this.cause);
    this.done = true;
    this.client.removeListener('error', this.onError);
    this.client.removeListener('end', this.onEnd);
    this.client.release();
  }

  destroy(cause?: unknown): void {
    if (this.done) return;
    this.done = true;
    this.closed = true;
    this.cbs = [];
    // Our error listener stays: a late socket error on a discarded client must not crash the process.
    this.client.removeListener('end', this.onEnd);
    this.client.release(cause instanceof Error ? cause : new Error('leasehold: connection discarded'));
  }
}
