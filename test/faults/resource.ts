/**
 * The fenced resource the contenders read-modify-write: a counter that must end equal to the
 * number of accepted writes. It lives outside every fault: a key on the shared Redis (6379,
 * never faulted) or a row in Postgres (reached directly, never through a proxy).
 *
 * Both reads and writes carry the holder's fence and are rejected when it is lower than the
 * highest the resource has seen; an accepted op records its fence (an equal fence passes). The
 * read must be fenced too: with a write-only check, a stale holder that read before the new
 * holder and writes *before the new holder's first write* is accepted, and the new holder's
 * write then overwrites it from a stale read — a lost update that fencing the writes alone lets
 * through (test/faults/checker.test.ts shows the history).
 *
 * Every op, accepted or not, is appended to the resource's own log in the order it was applied:
 * the checker reads that log rather than trusting the workers' reports (a worker killed after its
 * write was applied never reports it).
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { checkFence } from '../../src/backends/postgres/index.js';
import { StaleFenceError } from '../../src/errors.js';
import type { ResourceEntry, ResourceSpec } from './types.js';

export type OpResult = { ok: true; value: number } | { ok: false; highest: string };

export interface ResourceClient {
  /** Fenced read: registers `fence` and returns the value, or rejects a stale fence. */
  read(fence: string, id: string): Promise<OpResult>;
  /** Fenced write of `value` (computed from `from`, the value read). */
  write(fence: string, value: number, from: number, id: string): Promise<OpResult>;
  close(): Promise<void>;
}

/** The harness's side: create, read the log, drop. */
export interface ResourceAdmin {
  reset(): Promise<void>;
  log(): Promise<ResourceEntry[]>;
  /** The counter's final value. */
  value(): Promise<number>;
  drop(): Promise<void>;
  close(): Promise<void>;
}

// Fences are decimal strings without leading zeros: compare by length, then lexically.
const LOWER = `local function lower(a, b) return #a < #b or (#a == #b and a < b) end`;

/** KEYS value highest log; ARGV fence id → {1, value} | {0, highest} */
const READ = `${LOWER}
local hi = redis.call('GET', KEYS[2]) or '0'
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local ok = not lower(ARGV[1], hi)
if ok then redis.call('SET', KEYS[2], ARGV[1]) end
redis.call('RPUSH', KEYS[3], cjson.encode({op = 'read', fence = ARGV[1], accepted = ok, highest = hi, value = v, id = ARGV[2]}))
if ok then return {1, tostring(v)} end
return {0, hi}`;

/** KEYS value highest log; ARGV fence value from id → {1, value} | {0, highest} */
const WRITE = `${LOWER}
local hi = redis.call('GET', KEYS[2]) or '0'
local ok = not lower(ARGV[1], hi)
if ok then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[2], ARGV[1])
end
redis.call('RPUSH', KEYS[3], cjson.encode({op = 'write', fence = ARGV[1], accepted = ok, highest = hi,
  value = tonumber(ARGV[2]), from = tonumber(ARGV[3]), id = ARGV[4]}))
if ok then return {1, ARGV[2]} end
return {0, hi}`;

const redisKeys = (name: string) => [`${name}:value`, `${name}:highest`, `${name}:log`];

function parseReply(r: unknown): OpResult {
  const [ok, v] = r as [number, string];
  return ok === 1 ? { ok: true, value: Number(v) } : { ok: false, highest: String(v) };
}

class RedisResource implements ResourceClient, ResourceAdmin {
  private readonly client: Redis;
  constructor(private readonly spec: Extract<ResourceSpec, { kind: 'redis' }>) {
    this.client = new Redis({ host: '127.0.0.1', port: spec.port, lazyConnect: true, maxRetriesPerRequest: 3 });
    this.client.on('error', () => {});
  }
  async connect(): Promise<this> {
    await this.client.connect();
    return this;
  }
  async read(fence: string, id: string): Promise<OpResult> {
    return parseReply(await this.client.eval(READ, 3, ...redisKeys(this.spec.name), fence, id));
  }
  async write(fence: string, value: number, from: number, id: string): Promise<OpResult> {
    return parseReply(await this.client.eval(WRITE, 3, ...redisKeys(this.spec.name), fence, value, from, id));
  }
  async reset(): Promise<void> {
    await this.client.del(...redisKeys(this.spec.name));
  }
  async log(): Promise<ResourceEntry[]> {
    const raw = await this.client.lrange(redisKeys(this.spec.name)[2]!, 0, -1);
    return raw.map((s, i) => ({ ...(JSON.parse(s) as Omit<ResourceEntry, 'seq'>), seq: i + 1 }));
  }
  async value(): Promise<number> {
    return Number((await this.client.get(redisKeys(this.spec.name)[0]!)) ?? '0');
  }
  async drop(): Promise<void> {
    await this.reset();
  }
  async close(): Promise<void> {
    await this.client.quit().catch(() => this.client.disconnect());
  }
}

export const PG_URL = process.env.LEASEHOLD_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
/** Schema of leasehold's own fence tables in the faults runs (kept apart from other tests). */
export const PG_SCHEMA = 'leasehold_faults';
const RES = `${PG_SCHEMA}.resource`;
const LOG = `${PG_SCHEMA}.resource_log`;

/**
 * The Postgres resource: a row, fenced with leasehold's own `checkFence` inside the transaction
 * that reads or writes it (the seen-fence row lock serialises the ops, and the log row is written
 * under it, so the log's order is the order of application).
 */
class PgResource implements ResourceClient, ResourceAdmin {
  private readonly pool: pg.Pool;
  constructor(private readonly spec: Extract<ResourceSpec, { kind: 'postgres' }>) {
    this.pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
    this.pool.on('error', () => {});
  }
  async connect(): Promise<this> {
    return this;
  }
  private async op(
    kind: 'read' | 'write',
    fence: string,
    id: string,
    value?: number,
    from?: number,
  ): Promise<OpResult> {
    const c = await this.pool.connect();
    const name = this.spec.name;
    try {
      await c.query('BEGIN');
      try {
        await checkFence(c, name, BigInt(fence), { schema: PG_SCHEMA });
      } catch (e) {
        await c.query('ROLLBACK');
        if (!(e instanceof StaleFenceError)) throw e;
        const highest = e.highest.toString();
        await c.query(
          `INSERT INTO ${LOG} (name, op, fence, accepted, highest, value, from_value, id) VALUES ($1,$2,$3,false,$4,$5,$6,$7)`,
          [name, kind, fence, highest, value ?? 0, from ?? null, id],
        );
        return { ok: false, highest };
      }
      const cur = await c.query(`SELECT value::text AS v FROM ${RES} WHERE name = $1 FOR UPDATE`, [name]);
      const v = Number(cur.rows[0]?.v ?? 0);
      if (kind === 'write') await c.query(`UPDATE ${RES} SET value = $2 WHERE name = $1`, [name, value]);
      await c.query(
        `INSERT INTO ${LOG} (name, op, fence, accepted, highest, value, from_value, id)
         VALUES ($1,$2,$3,true,'0',$4,$5,$6)`,
        [name, kind, fence, kind === 'write' ? value : v, from ?? null, id],
      );
      await c.query('COMMIT');
      return { ok: true, value: kind === 'write' ? value! : v };
    } catch (e) {
      await c.query('ROLLBACK').catch(() => {});
      throw e;
    } finally {
      c.release();
    }
  }
  read(fence: string, id: string): Promise<OpResult> {
    return this.op('read', fence, id);
  }
  write(fence: string, value: number, from: number, id: string): Promise<OpResult> {
    return this.op('write', fence, id, value, from);
  }
  async reset(): Promise<void> {
    await this.pool.query(`CREATE SCHEMA IF NOT EXISTS ${PG_SCHEMA}`).catch(() => {});
    await this.pool.query(`CREATE TABLE IF NOT EXISTS ${RES} (name text PRIMARY KEY, value bigint NOT NULL)`);
    await this.pool.query(
      `CREATE TABLE IF NOT EXISTS ${LOG} (seq bigserial PRIMARY KEY, name text NOT NULL, op text NOT NULL,
        fence bigint NOT NULL, accepted boolean NOT NULL, highest bigint NOT NULL, value bigint NOT NULL,
        from_value bigint, id text NOT NULL)`,
    );
    await this.drop();
    await this.pool.query(`INSERT INTO ${RES} (name, value) VALUES ($1, 0)`, [this.spec.name]);
  }
  async log(): Promise<ResourceEntry[]> {
    const r = await this.pool.query(
      `SELECT op, fence::text, accepted, highest::text, value::text, from_value::text, id FROM ${LOG}
       WHERE name = $1 ORDER BY seq`,
      [this.spec.name],
    );
    return r.rows.map((row: any, i: number) => {
      const e: ResourceEntry = {
        seq: i + 1,
        op: row.op,
        fence: row.fence,
        accepted: row.accepted,
        highest: row.highest,
        value: Number(row.value),
        id: row.id,
      };
      if (row.from_value !== null) e.from = Number(row.from_value);
      return e;
    });
  }
  async value(): Promise<number> {
    const r = await this.pool.query(`SELECT value::text AS v FROM ${RES} WHERE name = $1`, [this.spec.name]);
    return Number(r.rows[0]?.v ?? 0);
  }
  async drop(): Promise<void> {
    await this.pool.query(`DELETE FROM ${RES} WHERE name = $1`, [this.spec.name]).catch(() => {});
    await this.pool.query(`DELETE FROM ${LOG} WHERE name = $1`, [this.spec.name]).catch(() => {});
    await this.pool
      .query(`DELETE FROM ${PG_SCHEMA}.leasehold_fence_seen WHERE resource = $1`, [this.spec.name])
      .catch(() => {});
  }
  async close(): Promise<void> {
    await this.pool.end().catch(() => {});
  }
}

export async function openResource(spec: ResourceSpec): Promise<ResourceClient & ResourceAdmin> {
  return spec.kind === 'redis' ? new RedisResource(spec).connect() : new PgResource(spec).connect();
}
