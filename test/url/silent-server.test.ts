/**
 * fromUrl against a Redis URL whose server accepts the connection and never answers (a wrong
 * port on a host running something else, a frozen server, a proxy to nowhere): the open fails
 * within its connect bound, without the password, and leaves no connection behind. Before, the
 * ioredis path bounded only the TCP connect (connectTimeout) and then waited for the ready check
 * forever: `fromUrl('redis://…')` never settled and `leasehold status --url …` hung.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import net from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { BackendError, fromUrl } from '../../src/index.js';
import { CONNECT_MS } from '../../src/redis-urls.js';
import { freePorts } from '../support/ports.js';

const servers: net.Server[] = [];
const open = new Set<net.Socket>();
let ports: number[] = [];

beforeAll(async () => {
  ports = await freePorts(5);
  for (const port of ports) {
    const s = net.createServer((c) => {
      open.add(c);
      c.on('close', () => open.delete(c)).on('error', () => {});
      c.resume(); // read and drop: nothing is ever answered
    });
    await new Promise<void>((resolve) => s.listen(port, '127.0.0.1', resolve));
    servers.push(s);
  }
});
afterAll(async () => {
  for (const c of open) c.destroy();
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
});

test('a redis:// server (one, or a Redlock majority) that never answers fails the open within its bound (a silent minority is a node down), and nothing is left connected', async () => {
  const started = performance.now();
  const warnings: string[] = [];
  const onWarning = (m: unknown) => warnings.push((m as { message: string }).message);
  subscribe('leasehold:warning', onWarning);
  const [one, many, minority] = await Promise.all([
    fromUrl(`redis://u:S3cretPw@127.0.0.1:${ports[0]}`).catch((e: unknown) => e),
    fromUrl(ports.slice(1, 4).map((p) => `redis://u:S3cretPw@127.0.0.1:${p}/2`)).catch((e: unknown) => e),
    // a silent minority is a node down: Redlock opens on the other two, with a warning
    fromUrl(['redis://127.0.0.1:7001/11', 'redis://127.0.0.1:7002/11', `redis://u:S3cretPw@127.0.0.1:${ports[4]}/11`]),
  ]).finally(() => unsubscribe('leasehold:warning', onWarning));
  const took = performance.now() - started;
  expect(minority.name).toBe('redlock');
  expect(warnings).toEqual([
    `redlock: could not connect to redis://***@127.0.0.1:${ports[4]}/11: no answer within ${CONNECT_MS}ms; going on with 2 of 3 nodes (it rejoins when it answers)`,
  ]);
  await minority.close();
  for (const e of [one, many]) {
    expect(e).toBeInstanceOf(BackendError);
    expect((e as Error).message).toMatch(/could not connect to redis:\/\/\*\*\*@127\.0\.0\.1:\d+.*no answer within/);
    expect(String((e as Error).stack)).not.toMatch(/S3cretPw/);
  }
  expect(took).toBeLessThan(CONNECT_MS + 2500);
  await expect.poll(() => open.size, { timeout: 2000 }).toBe(0);
}, 15_000);
