/**
 * The package ships an ESM and a CommonJS build, each with its own copy of the error classes and
 * of MemoryStore; an app can load both (an ESM app with a CommonJS dependency). These run the
 * built dist/ in a separate Node process, as such an app would.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, expect, test } from 'vitest';
import { ensureBuilt } from '../../scripts/built.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const dist = (f: string) => JSON.stringify(join(ROOT, 'dist', f));

beforeAll(() => ensureBuilt(ROOT), 120_000);

/** Runs an ES module with `E`/`C` (root), `Em`/`Cm` (memory) and `Er`/`Cr` (redis) loaded; returns what it prints as JSON. */
function run(body: string): unknown {
  const src = `
    import { createRequire } from 'node:module';
    const require = createRequire(import.meta.url);
    const E = await import(${dist('index.js')}), C = require(${dist('index.cjs')});
    const Em = await import(${dist('backends/memory/index.js')}), Cm = require(${dist('backends/memory/index.cjs')});
    const Er = await import(${dist('backends/redis/index.js')}), Cr = require(${dist('backends/redis/index.cjs')});
    const thrown = (f) => { try { f(); } catch (e) { return e; } };
    const out = await (async () => { ${body} })();
    console.log(JSON.stringify(out));
  `;
  const stdout = execFileSync(process.execPath, ['--input-type=module', '-e', src], { cwd: ROOT, encoding: 'utf8' });
  return JSON.parse(stdout);
}

test('an error of either build is an instance of the other build’s classes (and of no unrelated one)', () => {
  const r = run(`
    const names = ['LeaseholdError', 'ClosedError', 'InvalidArgumentError', 'LockTimeoutError', 'LeaseLostError',
      'QuorumError', 'BackendError', 'StaleFenceError', 'ConflictError', 'NotLeaderError'];
    const make = (M) => [new M.ClosedError(), new M.InvalidArgumentError('x'), new M.LockTimeoutError('k', 1),
      new M.LeaseLostError('k', 'x'), new M.QuorumError('x', []), new M.BackendError('x'),
      new M.StaleFenceError('r', 1n, 2n), new M.ConflictError(1), new M.NotLeaderError('x')];
    const table = (errs, M) => errs.map((e) => names.filter((n) => e instanceof M[n]).join(' '));
    return {
      esmInCjs: table(make(E), C), cjsInEsm: table(make(C), E), esmInEsm: table(make(E), E),
      redis: [Cr, Er].map((R) => { const e = thrown(() => R.redis('redis://x')); return [e instanceof E.InvalidArgumentError, e instanceof C.InvalidArgumentError, e instanceof E.LeaseholdError, e instanceof C.LeaseholdError, e instanceof E.BackendError]; }),
      plain: [new Error('x') instanceof E.LeaseholdError, ({ code: 'LEASEHOLD_CLOSED' }) instanceof C.ClosedError, null instanceof E.LeaseholdError],
    };
  `) as Record<string, unknown>;
  const expected = [
    'LeaseholdError ClosedError',
    'LeaseholdError InvalidArgumentError',
    'LeaseholdError LockTimeoutError',
    'LeaseholdError LeaseLostError',
    'LeaseholdError QuorumError',
    'LeaseholdError BackendError',
    'LeaseholdError StaleFenceError',
    'LeaseholdError ConflictError',
    'LeaseholdError NotLeaderError',
  ];
  expect(r.esmInEsm).toEqual(expected);
  expect(r.esmInCjs).toEqual(expected);
  expect(r.cjsInEsm).toEqual(expected);
  expect(r.redis).toEqual([
    [true, true, true, true, false],
    [true, true, true, true, false],
  ]);
  expect(r.plain).toEqual([false, false, false]);
});

test('a MemoryStore of the CommonJS build is accepted by the ESM memory(), and shared', () => {
  const r = run(`
    const store = new Cm.MemoryStore();
    const a = E.createLocks(Em.memory({ store })), b = C.createLocks(Cm.memory({ store }));
    const lease = await a.acquire('k');
    const other = await b.tryAcquire('k');
    await lease.release();
    await a.close(); await b.close();
    return { other, notAStore: thrown(() => Em.memory({ store: {} }))?.message };
  `);
  expect(r).toEqual({ other: null, notAStore: 'memory: store must be a MemoryStore' });
});

test('ESM createLocks over a CommonJS backend that was closed: ClosedError, not a BackendError around it', () => {
  const r = run(`
    const backend = Cm.memory();
    const locks = E.createLocks(backend, { ttl: '2s', wait: '200ms' });
    await (await locks.acquire('a')).release();
    await backend.close();
    const e = await locks.acquire('b').then(() => null, (e) => e);
    await locks.close().catch(() => {});
    return [e.name, e.code, e instanceof E.ClosedError, e instanceof C.ClosedError];
  `);
  expect(r).toEqual(['ClosedError', 'LEASEHOLD_CLOSED', true, true]);
});

test('the ESM ownerTxn over an etcd() backend of the CommonJS build (real etcd)', () => {
  const hosts = JSON.stringify(
    (process.env.LEASEHOLD_ETCD_HOSTS ?? '127.0.0.1:2379').split(',').map((h) => `http://${h}`),
  );
  const r = run(`
    const { Etcd3 } = require('etcd3');
    const Ee = await import(${dist('backends/etcd/index.js')}), Ce = require(${dist('backends/etcd/index.cjs')});
    const client = new Etcd3({ hosts: ${hosts}, dialTimeout: 2000 });
    const backend = Ce.etcd(client);
    const locks = C.createLocks(backend, { ttl: '5s' });
    const lease = await locks.acquire('dual-owner-' + process.pid);
    const key = 'leasehold-dual-owner-' + process.pid;
    let ok;
    try {
      ok = (await Ee.ownerTxn(backend, lease).then(client.put(key).value('v')).commit()).succeeded;
    } catch (e) {
      ok = e.name + ': ' + e.message;
    }
    await lease.release();
    await client.delete().key(key);
    await locks.close();
    client.close();
    return ok;
  `);
  expect(r).toBe(true);
});
