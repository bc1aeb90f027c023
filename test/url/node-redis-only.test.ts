/**
 * `fromUrl('redis://…')` where only node-redis is installed: a copy of src/ in a temporary
 * directory whose node_modules has every package of this project's but ioredis, run in a child.
 * node-redis retries a first connect forever by default, so a refused connection or a database
 * the server does not have left `fromUrl` (and the CLI on it) pending for good.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { freePort } from '../support/ports.js';

const root = resolve(__dirname, '../..');
const dir = mkdtempSync(join(tmpdir(), 'leasehold-noio-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function project(): void {
  cpSync(join(root, 'src'), join(dir, 'src'), { recursive: true });
  mkdirSync(join(dir, 'node_modules'));
  for (const name of readdirSync(join(root, 'node_modules'))) {
    if (name === 'ioredis' || name === '@ioredis') continue;
    symlinkSync(join(root, 'node_modules', name), join(dir, 'node_modules', name));
  }
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
}

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
  project();
  writeFileSync(join(dir, 'child.ts'), child);
  const closed = await freePort(); // nothing listens on it
  const urls = [`redis://127.0.0.1:${closed}`, 'redis://:S3CRETpw@127.0.0.1:6379/99', 'redis://127.0.0.1:6379'];
  const stdout = await new Promise<string>((ok, fail) =>
    execFile(
      process.execPath,
      ['--import', 'tsx', 'child.ts', ...urls],
      { cwd: dir, timeout: 30_000 },
      (e, out, err) => (e ? fail(new Error(`${e.message}\n${err}`)) : ok(out)),
    ),
  );
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
