/**
 * Which files a connection opened by path writes to, so that a write can tell when the path no
 * longer names them: the database file deleted or replaced (a rename over it, a restore), or its
 * `-wal` or `-shm` deleted. SQLite goes on writing to the files it holds open (in WAL mode it
 * refuses nothing), while the next process to open the path gets fresh files — and grants every
 * lock again. A connection's files never change while it is open: SQLite removes `-wal` and
 * `-shm` only when the last connection closes (it cannot while this one holds its shared lock),
 * and a checkpoint, `journal_size_limit` or a WAL reset rewrites or truncates them in place.
 *
 * The three `stat` calls cost about 15 µs here, a third of an acquire's transaction: they run at
 * most once per CHECK_MS. A write within CHECK_MS of a deletion may still go to the old files; the
 * one after it (the next renewal of a lease it granted or renewed) is refused.
 *
 * SQLite opens the database file when the connection is made, but its `-wal` and `-shm` only at
 * the first read, by name: the file is compared with what the path named when the connection was
 * made (`fileId` then), so a file deleted or replaced before the backend's first use is caught too.
 */
import { realpathSync, statSync } from 'node:fs';
import { now } from '../../wait.js';

/** The paths are looked at again at most this often (ms). */
export const CHECK_MS = 1;

/** A file: its device and inode. */
export interface FileId {
  readonly dev: number;
  readonly ino: number;
}

interface Seen extends FileId {
  readonly path: string;
}

/** The file `path` names now (through a symbolic link), or null when it names none. */
export function fileId(path: string): FileId | null {
  const s = statSync(path, { throwIfNoEntry: false });
  return s ? { dev: s.dev, ino: s.ino } : null;
}

export class FileIdentity {
  private checkedAt = now();

  private constructor(
    private readonly seen: readonly Seen[],
    /** What had already changed at `take` (never passes). */
    private readonly lost: string | null,
  ) {}

  /**
   * The files `file` (absolute) and its `-wal` and `-shm` are now; call it once the connection has
   * read. `opened`: the file the path named when the connection was made (null: none); the path
   * must still name it.
   */
  static take(file: string, opened: FileId | null = fileId(file)): FileIdentity {
    const seen: Seen[] = [];
    const main = fileId(file);
    const lost =
      opened === null || main === null
        ? `${file} was deleted`
        : main.dev !== opened.dev || main.ino !== opened.ino
          ? `${file} was replaced by another file`
          : null;
    if (opened) seen.push({ path: file, ...opened });
    // SQLite names the -wal and -shm after the file a symbolic link points to
    let real = file;
    try {
      real = realpathSync(file);
    } catch {
      // gone already: `lost` says so
    }
    for (const path of [`${real}-wal`, `${real}-shm`]) {
      const id = fileId(path);
      if (id) seen.push({ path, ...id });
    }
    return new FileIdentity(seen, lost);
  }

  /** null while every path still names the file it named at `take` (looked at CHECK_MS ago at most); else what changed. */
  changed(): string | null {
    if (this.lost !== null) return this.lost;
    const t = now();
    if (t - this.checkedAt < CHECK_MS) return null;
    this.checkedAt = t;
    for (const { path, dev, ino } of this.seen) {
      const s = statSync(path, { throwIfNoEntry: false });
      if (!s) return `${path} was deleted`;
      if (s.ino !== ino || s.dev !== dev) return `${path} was replaced by another file`;
    }
    return null;
  }
}
