/**
 * No token and no password in anything the etcd backend hands back: an etcd member with auth on
 * (user root, a random password in the URL), then faults — the holder's lease revoked from
 * outside, the member killed — and every error, diagnostics_channel message, `util.inspect` and
 * JSON of leases, Locks and the backend is hunted for the tokens and the password.
 */
import { randomUUID } from 'node:crypto';
import { inspect } from 'node:util';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { createLocks, fromUrl, type Lease } from '../../src/index.js';
import { EtcdCluster } from '../support/etcd-cluster.js';
import { collectEvents, findSecret, keep, recordTokens, strings } from '../support/secrets.js';

const PASSWORD = `pw-${randomUUID()}`;
let member: EtcdCluster;

const aborted = (signal: AbortSignal) =>
  new Promise<void>((r) => (signal.aborted ? r() : signal.addEventListener('abort', () => r(), { once: true })));

beforeAll(async () => {
  member = await EtcdCluster.start(1);
  member.etcdctl('user', 'add', `root:${PASSWORD}`);
  member.etcdctl('auth', 'enable');
}, 60_000);
afterAll(async () => {
  await member?.stop();
});

test('fromUrl with a password: a revoked lease and a dead member leave no token and no password anywhere', async () => {
  const url = `etcd://root:${PASSWORD}@${member.hosts[0]}/?leaseTtl=2s`;
  const backend = await fromUrl(url);
  const tokens = new Set<string>();
  const events = collectEvents();
  const kept: unknown[] = [];
  const locks = createLocks(recordTokens(backend, tokens), { prefix: 'sec-etcd', ttl: 900, opTimeout: 1000 });
  const leases: Lease[] = [];
  try {
    for (const k of ['a', 'b', 'c']) leases.push(await locks.acquire(k));
    kept.push(await locks.idempotent('once', () => 42));
    await keep(kept, locks.acquire('a', { wait: 100 })); // a LockTimeoutError
    await keep(kept, locks.inspect('a'));
    // an outsider revokes our lease (with the password, as an operator would)
    const lease = /^\s*(\S+)/.exec(
      member.etcdctl(`--user=root:${PASSWORD}`, 'lease', 'list').split('\n').slice(1).join('\n'),
    )?.[1];
    expect(lease).toBeDefined();
    member.etcdctl(`--user=root:${PASSWORD}`, 'lease', 'revoke', lease!);
    await Promise.all(leases.map((l) => aborted(l.signal)));
    kept.push(...leases.map((l) => l.signal.reason));
    await member.kill(0); // and a dead server
    await keep(kept, locks.tryAcquire('d'));
    await keep(kept, locks.acquire('e', { wait: 300 }));
    await keep(kept, locks.inspect('a'));
  } finally {
    events.stop();
  }
  const printed = [
    ...leases.map((l) => inspect(l, { depth: 10, showHidden: true })),
    ...leases.map((l) => JSON.stringify(l)),
    inspect(locks, { depth: 10, showHidden: true }),
    inspect(backend, { depth: 10, showHidden: true }),
    JSON.stringify(backend),
  ];
  await keep(kept, locks.close());
  const text = strings(kept)
    .map(([, s]) => s)
    .join('\n');
  expect(text).toMatch(/LEASEHOLD_LEASE_LOST|lost/);
  expect(kept.some((e) => (e as { code?: string })?.code === 'LEASEHOLD_BACKEND')).toBe(true);
  expect(tokens.size).toBeGreaterThan(4);
  expect(findSecret([kept, events.messages, printed, leases], [PASSWORD, ...tokens])).toBeNull();
  await member.restart(0);
}, 60_000);
