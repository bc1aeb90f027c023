/** Temporary SQLite database files for tests, removed when the test file ends. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export class TempDbs {
  private readonly dirs: string[] = [];

  /** A fresh path (the file does not exist yet) in a fresh directory. */
  path(name = 'locks.db'): string {
    const dir = mkdtempSync(join(tmpdir(), 'leasehold-test-'));
    this.dirs.push(dir);
    return join(dir, name);
  }

  cleanup(): void {
    for (const d of this.dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  }
}
