/**
 * `sqlite:` URLs and the default database of the CLI.
 *
 *   sqlite:                  the default: $XDG_STATE_HOME/leasehold/locks.db, else ~/.local/state/leasehold/locks.db
 *   sqlite:locks.db          relative to the working directory
 *   sqlite:/var/lib/x.db     absolute (also sqlite:///var/lib/x.db)
 *   sqlite:~/x.db            in the home directory
 */
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { InvalidArgumentError } from '../../errors.js';

/** The default database file: in the user's state directory (XDG Base Directory). */
export function defaultPath(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_STATE_HOME;
  const base = xdg && isAbsolute(xdg) ? xdg : join(env.HOME || homedir(), '.local', 'state');
  return join(base, 'leasehold', 'locks.db');
}

/** The file a `sqlite:` URL names. */
export function pathFromUrl(url: string, env: NodeJS.ProcessEnv = process.env): string {
  if (!/^sqlite:/i.test(url)) throw new InvalidArgumentError('a sqlite URL starts with sqlite:');
  let rest = url.slice('sqlite:'.length);
  if (rest.startsWith('//')) {
    const slash = rest.indexOf('/', 2);
    const host = slash < 0 ? rest.slice(2) : rest.slice(2, slash);
    if (host !== '' && host !== 'localhost') {
      throw new InvalidArgumentError(
        `sqlite URLs name a local file, not a host ("${host}"): use sqlite:/path/to/file.db`,
      );
    }
    rest = slash < 0 ? '' : rest.slice(slash);
  }
  const q = rest.search(/[?#]/);
  if (q >= 0) throw new InvalidArgumentError('sqlite URLs take no query or fragment');
  let path: string;
  try {
    path = decodeURIComponent(rest);
  } catch {
    throw new InvalidArgumentError('the sqlite URL has a malformed %-escape');
  }
  if (path.includes('\u0000')) throw new InvalidArgumentError('the sqlite path contains a NUL character');
  if (path === '') return defaultPath(env);
  if (path === '~' || path.startsWith('~/')) return join(env.HOME || homedir(), path.slice(1));
  return path;
}
