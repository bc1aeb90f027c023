/**
 * The key's window node (runExclusive's lockAtLeastFor, and an extension to another TTL): a
 * persistent node whose end is the server's mtime plus the stored `ms`, honoured by every
 * acquirer, also after the process and the session that wrote it are gone.
 */
import type { ZkSession } from './client.js';
import { decodeData, WINDOW } from './paths.js';
import { missing, ignore } from './protected.js';
import { BAD_VERSION, NO_NODE } from './protocol.js';

export interface Window {
  digest: string;
  fence: bigint;
  end: number;
  version: number;
}

export async function readWindow(zk: ZkSession, dir: string): Promise<Window | null> {
  try {
    const { data, stat } = await zk.getData(`${dir}/${WINDOW}`);
    const d = decodeData(data);
    if (!d || typeof d.ms !== 'number') return null;
    return { digest: d.d, fence: BigInt(d.f ?? '0'), end: stat.mtime + d.ms, version: stat.version };
  } catch (e) {
    if (missing(e)) return null;
    throw e;
  }
}

/** A window that has run out is removed (versioned: a fresh one written meanwhile stays). */
export function dropWindow(zk: ZkSession, dir: string, w: Window): void {
  zk.remove(`${dir}/${WINDOW}`, w.version).catch(() => {});
}

/** Removes the window in `dir` if it is the one of the holder with protection id `digest`. */
export async function removeOurWindow(zk: ZkSession, dir: string, digest: string): Promise<void> {
  const w = await readWindow(zk, dir);
  if (w && w.digest === digest) await zk.remove(`${dir}/${WINDOW}`, w.version).catch(ignore(NO_NODE, BAD_VERSION));
}
