/**
 * One waiting process of the queue tests. argv: url prefix key holdMs. Acquires `key` (waiting
 * up to 30 s), prints one JSON line { granted, fence, released, stats } once it let go again
 * (times by the wall clock, ms), then exits. Prints { ready: true } once its backend is open.
 */
import pg from 'pg';
import { postgres } from '../../src/backends/postgres/index.js';
import { createLocks } from '../../src/index.js';

const [url, prefix, key, holdMs] = process.argv.slice(2) as [string, string, string, string];
const pool = new pg.Pool({ connectionString: url, max: 4 });
pool.on('error', () => {});
const backend = postgres(pool);
const locks = createLocks(backend, { prefix, ttl: '30s' });
await (await locks.acquire(`${key}:warm`)).release(); // tables, session connection, statements
process.stdout.write(JSON.stringify({ ready: true }) + '\n');
const lease = await locks.acquire(key, { wait: '30s' });
const granted = Date.now();
await new Promise((r) => setTimeout(r, Number(holdMs)));
await lease.release();
const released = Date.now();
const stats = (backend as unknown as { stats: unknown }).stats;
process.stdout.write(JSON.stringify({ granted, fence: String(lease.fence), released, stats }) + '\n');
await locks.close();
await pool.end();
