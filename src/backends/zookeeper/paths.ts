/**
 * Where things live in the tree, under the backend's root (default `/leasehold`):
 *
 *   <root>/locks/<encoded key>/<digest>-lock-<sequence>   EPHEMERAL_SEQUENTIAL, one per holder or waiter
 *   <root>/locks/<encoded key>/window                     PERSISTENT: a stored expiry (lockAtLeastFor)
 *   <root>/results/<encoded key>                          PERSISTENT: an idempotency result + expiry
 *
 * A key is encoded per character (letters, digits, `-`, `_`, `:` and `=` stay; every other
 * UTF-8 byte becomes `%XX`), so a key prefix is a prefix of the encoded name (list by prefix)
 * and no name is `.`, `..` or holds a character ZooKeeper refuses. The `<digest>` is the
 * protection id: the SHA-256 of the holder's token (never the token), so a create whose reply
 * was lost is found again by its name after a reconnect.
 */
import { digest } from '../../hash.js';

export const LOCK_MARK = '-lock-';
export const WINDOW = 'window';

export function encodeKey(key: string): string {
  let out = '';
  for (const b of Buffer.from(key, 'utf8')) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9_:=-]/.test(c) && b < 0x80 ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

export function decodeKey(name: string): string | null {
  try {
    return Buffer.from(
      name.replace(/%([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))),
      'latin1',
    ).toString('utf8');
  } catch {
    return null;
  }
}

/** The protection id of a token: 22 base64url characters of its SHA-256 (132 bits). */
export const digestOf = (token: string): string => digest('sha256', token).toString('base64url').slice(0, 22);

export interface LockNode {
  readonly name: string;
  readonly digest: string;
  readonly seq: number;
}

/** A lock node's parts, or null for anything else (the window, a stranger's node). */
export function parseLockNode(name: string): LockNode | null {
  const at = name.lastIndexOf(LOCK_MARK);
  if (at <= 0) return null;
  const seq = Number(name.slice(at + LOCK_MARK.length));
  if (!Number.isInteger(seq) || seq < 0) return null;
  return { name, digest: name.slice(0, at), seq };
}

/** The lock nodes among `children`, lowest sequence first (the holder, then the waiters in order). */
export function lockNodes(children: readonly string[]): LockNode[] {
  const out: LockNode[] = [];
  for (const c of children) {
    const n = parseLockNode(c);
    if (n) out.push(n);
  }
  return out.sort((a, b) => a.seq - b.seq);
}

export class Paths {
  readonly locks: string;
  readonly results: string;
  constructor(readonly root: string) {
    this.locks = `${root === '/' ? '' : root}/locks`;
    this.results = `${root === '/' ? '' : root}/results`;
  }
  dir(key: string): string {
    return `${this.locks}/${encodeKey(key)}`;
  }
  window(key: string): string {
    return `${this.dir(key)}/${WINDOW}`;
  }
  result(key: string): string {
    return `${this.results}/${encodeKey(key)}`;
  }
}

/** What a lock node and a window store: the holder's digest, its value, and the fence (window). */
export interface NodeData {
  d: string;
  v?: string;
  f?: string;
  ms?: number;
}

export const encodeData = (d: NodeData): Buffer => Buffer.from(JSON.stringify(d), 'utf8');

export function decodeData(b: Buffer | null): NodeData | null {
  if (!b || b.length === 0) return null;
  try {
    const x = JSON.parse(b.toString('utf8')) as NodeData;
    return x && typeof x === 'object' && typeof x.d === 'string' ? x : null;
  } catch {
    return null;
  }
}
