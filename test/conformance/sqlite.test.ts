import Database from 'better-sqlite3';
import { sqlite } from '../../src/backends/sqlite/index.js';
import { TempDbs } from '../support/sqlite.js';
import { conformance } from './suite.js';

const dbs = new TempDbs();
const file = dbs.path();
let admin: Database.Database | null = null;
/** An outsider's own connection (another process would have one). */
const outsider = () => (admin ??= new Database(file, { timeout: 2000 }));

conformance({
  name: 'sqlite',
  make: async () => sqlite(file),
  breakLock: async (fullKey, how) => {
    const db = outsider();
    if (how === 'delete')
      db.prepare('UPDATE leasehold_locks SET holder = NULL, expires = 0 WHERE key = ?').run(fullKey);
    else db.prepare(`UPDATE leasehold_locks SET holder = 'someone-else' WHERE key = ?`).run(fullKey);
  },
  countKeys: async (prefix) =>
    (
      outsider()
        .prepare(
          `SELECT (SELECT count(*) FROM leasehold_locks WHERE substr(key, 1, length($p)) = $p) +
                  (SELECT count(*) FROM leasehold_queue WHERE substr(key, 1, length($p)) = $p) AS n`,
        )
        .get({ p: prefix }) as { n: number }
    ).n,
  cleanup: async () => {
    admin?.close();
    dbs.cleanup();
  },
});
