/** What is particular to the SQLite backend: options, URLs, a locked database, a reboot, secrets at rest. */
import { readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, test } from 'vitest';
import { REBOOT_FENCE_JUMP } from '../../src/backends/sqlite/schema.js';
import { PLACE_MS } from '../../src/backends/sqlite/backend.js';
import { defaultPath, pathFromUrl, sqlite } from '../../src/backends/sqlite/index.js';
import { BackendError, createLocks, fromUrl, InvalidArgumentError } from '../../src/index.js';
import { findSecret } from '../support/secrets.js';
import { TempDbs } from '../support/sqlite.js';

const dbs = new TempDbs();
afterAll(() => dbs.cleanup());

/** A path whose directory cannot exist: its parent is a regular file. */
function impossiblePath(): string {
  const file = dbs.path('not-a-directory');
  writeFileSync(file, '');
  return join(file, 'x.db');
}

describe('sqlite: arguments', () => {
  test('bad arguments and options are refused before the file is touched', () => {
    const path = dbs.path();
    const bad: unknown[][] = [
      [''],
      [42],
      [undefined],
      [{ prepare: 1 }],
      ['a\u0000b'],
      [path, { pollInterval: 0 }],
      [path, { pollInterval: 'soon' }],
      [path, { busyTimeout: -1 }],
      [path, { synchronous: 'off' }],
      [path, { mkdir: 'yes' }],
      [path, { colour: 'red' }],
      [path, null],
    ];
    for (const args of bad) expect(() => (sqlite as any)(...args), JSON.stringify(args)).toThrow(InvalidArgumentError);
    expect(readdirSync(dirname(path))).toEqual([]);
  });

  test('an unopenable file is a BackendError', () => {
    expect(() => sqlite(impossiblePath())).toThrow(BackendError);
    expect(() => sqlite(impossiblePath(), { mkdir: false })).toThrow(BackendError);
    // a parent that refuses new entries with ENOENT: Node 20's recursive mkdir looped there forever
    expect(() => sqlite('/proc/leasehold-no-such/x.db')).toThrow(/cannot create the directory .* ENOENT/);
  });

  test('missing directories are made, several levels deep', () => {
    const path = join(dbs.path('deep'), 'a', 'b', 'locks.db');
    sqlite(path).close();
    expect(readdirSync(dirname(path))).toContain('locks.db');
  });

  test('sqlite: URLs name local files; the default lives in the XDG state directory', () => {
    const env = { HOME: '/home/ada' };
    expect(defaultPath(env)).toBe('/home/ada/.local/state/leasehold/locks.db');
    expect(defaultPath({ ...env, XDG_STATE_HOME: '/var/state' })).toBe('/var/state/leasehold/locks.db');
    expect(defaultPath({ ...env, XDG_STATE_HOME: 'relative' })).toBe('/home/ada/.local/state/leasehold/locks.db');
    expect(pathFromUrl('sqlite:', env)).toBe('/home/ada/.local/state/leasehold/locks.db');
    expect(pathFromUrl('sqlite:locks.db', env)).toBe('locks.db');
    expect(pathFromUrl('sqlite:/var/lib/x.db', env)).toBe('/var/lib/x.db');
    expect(pathFromUrl('sqlite:///var/lib/x.db', env)).toBe('/var/lib/x.db');
    expect(pathFromUrl('sqlite://localhost/var/lib/x.db', env)).toBe('/var/lib/x.db');
    expect(pathFromUrl('sqlite:~/x.db', env)).toBe('/home/ada/x.db');
    expect(pathFromUrl('sqlite:my%20locks.db', env)).toBe('my locks.db');
    for (const u of ['sqlite://db.example.com/x.db', 'sqlite:x.db?mode=ro', 'sqlite:%zz', 'redis://x']) {
      expect(() => pathFromUrl(u, env), u).toThrow(InvalidArgumentError);
    }
  });

  test('fromUrl("sqlite:<path>") opens the file; close() closes the connection it made', async () => {
    const path = dbs.path();
    const backend = await fromUrl(`sqlite:${path}`);
    expect(backend.name).toBe('sqlite');
    const locks = createLocks(backend);
    const lease = await locks.acquire('url');
    expect(lease.fence > 0n).toBe(true); // the first fence of a new file: its floor (the time in µs) + 1
    await locks.close();
    expect((backend as unknown as { db: Database.Database }).db.open).toBe(false);
    await expect(fromUrl('sqlite://elsewhere/x.db')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(fromUrl(`sqlite:${impossiblePath()}`)).rejects.toBeInstanceOf(BackendError);
  });
});

describe('sqlite: behaviour', () => {
  test('a connection you pass is switched to WAL, used, and left open', async () => {
    const db = new Database(dbs.path());
    const locks = createLocks(sqlite(db));
    const lease = await locks.acquire('mine', { value: 'v' });
    expect(await locks.inspect('mine')).toMatchObject({ fence: lease.fence, value: 'v' });
    await locks.close();
    expect(db.open).toBe(true);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
  });

  test('the database file holds digests, never a token or a lease value secret', async () => {
    const path = dbs.path();
    const locks = createLocks(sqlite(path, { synchronous: 'full' }));
    const lease = await locks.acquire('secret');
    const waiter = createLocks(sqlite(path));
    const queued = waiter.acquire('secret', { wait: '5s' });
    queued.catch(() => {}); // may reject before it is awaited below
    await new Promise((r) => setTimeout(r, 50));
    const bytes = ['', '-wal'].map((s) => readFileSync(path + s).toString('latin1')).join('');
    expect(bytes).toContain('leasehold:secret');
    expect(bytes).not.toContain(lease.token);
    expect(findSecret([locks, waiter, lease], [lease.token])).toBeNull(); // util.inspect, JSON, a deep walk
    await lease.release();
    await (await queued).release();
    await Promise.all([locks.close(), waiter.close()]);
  });

  test('while another process holds the write lock, calls wait without blocking the event loop', async () => {
    const path = dbs.path();
    const locks = createLocks(sqlite(path, { busyTimeout: '3s' }));
    await (await locks.acquire('warm')).release(); // tables exist
    const other = new Database(path, { timeout: 0 });
    other.prepare('BEGIN IMMEDIATE').run();
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 5);
    const t0 = performance.now();
    setTimeout(() => other.prepare('COMMIT').run(), 300);
    const lease = await locks.acquire('busy');
    const took = performance.now() - t0;
    clearInterval(ticker);
    expect(lease.held).toBe(true);
    expect(took).toBeGreaterThanOrEqual(290);
    expect(ticks).toBeGreaterThan(20); // the loop ran timers meanwhile
    // held for longer than busyTimeout: a clear BackendError for one attempt, and a wait that
    // retries it until its deadline says it as the cause
    const quick = createLocks(sqlite(path, { busyTimeout: 200 }));
    other.prepare('BEGIN IMMEDIATE').run();
    try {
      await expect(quick.acquire('busy2', { wait: 0 })).rejects.toMatchObject({
        code: 'LEASEHOLD_BACKEND',
        message: expect.stringMatching(/stayed locked for 200ms/),
      });
      await expect(quick.acquire('busy2', { wait: 600 })).rejects.toMatchObject({
        code: 'LEASEHOLD_LOCK_TIMEOUT',
        cause: expect.objectContaining({ code: 'LEASEHOLD_BACKEND', message: expect.stringMatching(/stayed locked/) }),
      });
    } finally {
      other.prepare('ROLLBACK').run();
      other.close();
    }
    // its first use (the open) met the locked database: once the lock is gone, the same backend
    // works (it kept the failed open and refused every call for good)
    const after = await quick.acquire('busy2', { wait: 0 });
    expect(after.held).toBe(true);
    await after.release();
    await Promise.all([locks.close(), quick.close()]);
  });

  test("on a connection the caller passed, the caller's synchronous setting is never lowered", async () => {
    const path = dbs.path();
    for (const [theirs, expected] of [
      [2, 2], // FULL stays FULL (it became NORMAL for every transaction of the caller's)
      [3, 3], // EXTRA stays EXTRA
      [0, 1], // OFF is raised to what leasehold needs: NORMAL
    ] as const) {
      const db = new Database(path);
      db.pragma(`synchronous = ${theirs}`);
      const locks = createLocks(sqlite(db));
      await (await locks.acquire('sync')).release();
      expect(db.pragma('synchronous', { simple: true }), `caller's ${theirs}`).toBe(expected);
      await locks.close();
      expect(db.pragma('synchronous', { simple: true })).toBe(expected);
      db.close();
    }
    // on its own connection (a path) the default stays NORMAL: nothing else shares it
  });

  test('a waiter that died in the queue holds up a free lock for its place (3 s), not its TTL', async () => {
    const path = dbs.path();
    const holder = createLocks(sqlite(path), { ttl: '30s' });
    const lease = await holder.acquire('dead-waiter');
    // a waiter with a 30 s TTL takes its place and then dies: it never tries again, never leaves
    const dead = sqlite(path);
    expect(await dead.acquire('leasehold:dead-waiter', { token: 'dead', ttlMs: 30_000, queue: true })).toBeNull();
    const next = createLocks(sqlite(path), { ttl: '30s' });
    await lease.release();
    const t0 = performance.now();
    const got = await next.acquire('dead-waiter', { wait: '20s' });
    const took = performance.now() - t0;
    expect(got.fence > lease.fence).toBe(true);
    expect(took).toBeLessThan(PLACE_MS + 1500); // its place ran out; before, it took the dead waiter's 30 s TTL
    await Promise.all([holder.close(), next.close(), dead.close()]);
  });

  test('a live waiter keeps its place past 3 s and is served first', async () => {
    const path = dbs.path();
    const holder = createLocks(sqlite(path));
    const lease = await holder.acquire('kept');
    const first = createLocks(sqlite(path), { ttl: '30s' });
    const waiting = first.acquire('kept', { wait: '20s' });
    // the first waiter is queued (its place is in the file) before the second comes
    const probe = new Database(path, { readonly: true });
    await expect
      .poll(() => probe.prepare('SELECT count(*) AS n FROM leasehold_queue').get(), { timeout: 5000 })
      .toEqual({ n: 1 });
    const second = createLocks(sqlite(path), { ttl: '30s' });
    const later = second.acquire('kept', { wait: '20s' });
    await expect
      .poll(() => probe.prepare('SELECT count(*) AS n FROM leasehold_queue').get(), { timeout: 5000 })
      .toEqual({ n: 2 });
    // past a place's life: the waiters renewed theirs by trying again
    await new Promise((r) => setTimeout(r, PLACE_MS + 500));
    await lease.release();
    const a = await waiting;
    expect(a.held).toBe(true);
    await a.release();
    const b = await later;
    expect(b.fence > a.fence).toBe(true);
    probe.close();
    await Promise.all([holder.close(), first.close(), second.close(), b.release()]);
  });

  test('after a reboot (another boot id) no lease survives and every fence jumps by 2^32', async () => {
    const path = dbs.path();
    const a = createLocks(sqlite(path));
    const held = await a.acquire('k', { ttl: '1h' });
    await a.close(); // released
    const b = createLocks(sqlite(path));
    const stays = await b.acquire('k', { ttl: '1h' });
    // the machine reboots: b's process is gone (its lease still in the file), the boot id changes
    const raw = new Database(path, { timeout: 2000 });
    raw.prepare(`UPDATE leasehold_meta SET value = 'mono:another-boot' WHERE name = 'clock'`).run();
    raw.close();
    const c = createLocks(sqlite(path));
    const after = await c.tryAcquire('k');
    expect(after).not.toBeNull();
    expect(after!.fence).toBe(stays.fence + REBOOT_FENCE_JUMP + 1n);
    expect(after!.fence > held.fence).toBe(true);
    expect(await stays.release()).toBe(false);
    await b.close();
    await c.close();
  });

  test('a key whose row a power loss took starts above its lost fences after the reboot', async () => {
    const path = dbs.path();
    const a = createLocks(sqlite(path));
    await (await a.acquire('old')).release();
    // the last sync point (synchronous = NORMAL syncs at a checkpoint): what a power loss keeps
    (a.backend as unknown as { db: Database.Database }).db.pragma('wal_checkpoint(TRUNCATE)');
    const synced = readFileSync(path);
    const issued: bigint[] = [];
    for (let i = 0; i < 3; i++) {
      const l = await a.acquire('new'); // its row exists only in unsynced commits
      issued.push(l.fence);
      await l.release();
    }
    const old = await a.acquire('old');
    await old.release();
    await a.close();
    // power loss: the file as last synced, the WAL gone; the machine boots with another boot id
    for (const s of ['-wal', '-shm']) rmSync(path + s, { force: true });
    writeFileSync(path, synced);
    const raw = new Database(path, { timeout: 2000 });
    raw.prepare(`UPDATE leasehold_meta SET value = 'mono:another-boot' WHERE name = 'clock'`).run();
    raw.close();
    const b = createLocks(sqlite(path));
    const n = await b.acquire('new');
    const o = await b.acquire('old');
    // before: the new row started at 1 again (fence 1 after fences 1, 2, 3)
    expect(n.fence > issued[2]!).toBe(true);
    expect(n.fence).toBe(issued[0]! - 1n + REBOOT_FENCE_JUMP + 1n);
    expect(o.fence > old.fence).toBe(true);
    await b.close();
  });

  test('a file an older version made keeps every fence increasing; its new keys start above them', async () => {
    const path = dbs.path();
    const a = createLocks(sqlite(path));
    await (await a.acquire('k')).release();
    await a.close();
    // what the older version left: no fence floor, rows counted from 1
    const raw = new Database(path, { timeout: 2000 });
    raw.prepare(`DELETE FROM leasehold_meta WHERE name = 'fence_floor'`).run();
    raw.prepare(`UPDATE leasehold_locks SET fence = 7`).run();
    raw.close();
    const b = createLocks(sqlite(path));
    expect((await b.acquire('k')).fence).toBe(8n);
    const fresh = await b.acquire('fresh');
    expect(fresh.fence > 8n).toBe(true);
    // seeded from the time in µs: a file made again later starts above this one's fences
    const wallUs = BigInt(Date.now()) * 1000n;
    expect(fresh.fence <= wallUs && fresh.fence > wallUs - 60_000_000n).toBe(true);
    await b.close();
  });

  test('list pages through many keys and stops at the end of the prefix', async () => {
    const path = dbs.path();
    const backend = sqlite(path);
    const locks = createLocks(backend, { prefix: 'p' });
    for (let i = 0; i < 600; i++) await locks.acquire(`many:${String(i).padStart(3, '0')}`);
    await locks.acquire('manz'); // after the prefix in key order
    await locks.acquire('man'); // before it
    const seen: string[] = [];
    for await (const info of locks.list('many:')) seen.push(info.key);
    expect(seen).toHaveLength(600);
    expect(seen[0]).toBe('many:000');
    expect(seen.at(-1)).toBe('many:599');
    await locks.close();
  });
});
