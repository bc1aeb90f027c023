/**
 * An `etcd://` URL's options are checked before fromUrl makes a client: a bad `leaseTtl` is an
 * InvalidArgumentError with no connection attempted — not a BackendError from a server that is
 * not there, nor a refusal after a round trip to one that is.
 */
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { fromUrl, InvalidArgumentError } from '../../src/index.js';

// a listener that only counts connections: any I/O fromUrl does reaches it
let server: Server;
let port = 0;
let connections = 0;
beforeAll(async () => {
  server = createServer((s) => {
    connections++;
    s.destroy();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  port = (server.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
});

test.each([
  ['leaseTtl=1s', /leaseTtl must be at least 2s/],
  ['leaseTtl=abc', /leaseTtl/],
  ['leaseTtl=', /leaseTtl/],
  ['leaseTtl=-5s', /leaseTtl/],
  ['leaseTtl=5s&leaseTtl=6s', /leaseTtl given twice/],
])('etcd://…?%s is refused with InvalidArgumentError before any I/O', async (query, message) => {
  const before = connections;
  for (const url of [`etcd://127.0.0.1:${port}?${query}`, `etcd://127.0.0.1:1?${query}`]) {
    const e = await fromUrl(url).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect((e as Error).message).toMatch(message);
  }
  expect(connections).toBe(before);
});
