/**
 * `fromUrl('redis://…')` where only node-redis is installed: a copy of src/ in a temporary
 * directory whose node_modules has every package of this project's but ioredis, run in a child.
 * node-redis retries a first connect forever by default, so a refused connection or a database
 * the server does not have left `fromUrl` (and the CLI on it) pending for good.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { freePort } from '../support/ports.js';
import { project } from '../support/project.js';

const p = project(['ioredis', '@ioredis']);
afterAll(() => p.remove());

const child = `
import { fromUrl, createLocks } from './src/index.ts';
const out = { ioredis: true, results: [] };
try { await import('ioredis'); } catch { out.ioredis = false; }
for (const url of process.argv.slice(2)) {
  const t0 = performance.now();
  try {
    const b = await fromUrl(url);
    const locks = createLocks(b);
    const lease = await locks.acquire('noio-' + process.pid);
    await lease.release();
    await locks.close();
    out.results.push({ url, ok: true, ms: performance.now() - t0 });
  } catch (e) {
    out.results.push({ url, ok: false, name: e.name, message: e.message, ms: performance.now() - t0 });
  }
}
console.log(JSON.stringify(out));
process.exit(0);
`;

test('with only node-redis installed, fromUrl rejects a refused connection and a missing database at once, and opens a good URL', async () => {
  writeFileSync(join(p.dir, 'child.ts'), child);
  const closed = await freePort(); // nothing listens on it
  const urls = [`redis://127.0.0.1:${closed}`, 'redis://:S3CRETpw@127.0.0.1:6379/99', 'redis://127.0.0.1:6379'];
  const r = await p.run(['child.ts', ...urls]);
  expect(r.code, r.stderr).toBe(0);
  const stdout = r.stdout;
  const out = JSON.parse(stdout.trim().split('\n').pop()!);
  expect(out.ioredis).toBe(false); // the child really has node-redis only
  const [refused, noDb, good] = out.results;
  expect(refused).toMatchObject({ ok: false, name: 'BackendError' });
  expect(refused.message).toMatch(/ECONNREFUSED/);
  expect(refused.ms).toBeLessThan(5_000);
  expect(noDb).toMatchObject({ ok: false, name: 'BackendError' });
  expect(noDb.message).toMatch(/DB index is out of range/);
  expect(noDb.message).not.toMatch(/S3CRETpw/);
  expect(noDb.ms).toBeLessThan(5_000);
  expect(good).toMatchObject({ ok: true });
}, 60_000);
