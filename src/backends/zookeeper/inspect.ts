/**
 * What holds a key, read from the tree (inspect, list): the lowest lock node (value, czxid),
 * else a live window; and the administrative break (forceRelease).
 */
import type { LockInfo } from '../../backend.js';
import type { ZkSession } from './client.js';
import { decodeData, lockNodes, WINDOW, type Paths } from './paths.js';
import { ignore, missing } from './protected.js';
import { NO_NODE } from './protocol.js';
import { readWindow } from './window.js';

/** What holds `key`: another holder's live window, else the lowest node (value, czxid), else our window. */
export async function inspectLock(zk: ZkSession, paths: Paths, key: string): Promise<LockInfo | null> {
  const dir = paths.dir(key);
  let children: string[];
  try {
    children = (await zk.getChildren(dir)).children;
  } catch (e) {
    if (missing(e)) return null;
    throw e;
  }
  // another holder's live window holds the key, also over the lowest node (a waiter it blocks)
  const w = children.includes(WINDOW) ? await readWindow(zk, dir) : null;
  const left = w ? w.end - Date.now() : 0;
  const windowed = (): LockInfo | null =>
    w && left > 0 ? { key, fence: w.fence, remainingMs: Math.ceil(left) } : null;
  for (const n of lockNodes(children)) {
    if (w && left > 0 && w.digest !== n.digest) return windowed();
    try {
      const { data, stat } = await zk.getData(`${dir}/${n.name}`);
      const d = decodeData(data);
      const info: LockInfo = { key, fence: stat.czxid, remainingMs: -1 };
      return d?.v === undefined ? info : { ...info, value: d.v };
    } catch (e) {
      if (!missing(e)) throw e; // released meanwhile: the next one holds
    }
  }
  return windowed();
}

/** Administrative break: deletes the holder's node and any window. */
export async function forceReleaseLock(zk: ZkSession, paths: Paths, key: string): Promise<LockInfo | null> {
  const info = await inspectLock(zk, paths, key);
  if (!info) return null;
  const dir = paths.dir(key);
  const { children } = await zk.getChildren(dir);
  const head = lockNodes(children)[0];
  const ops: Promise<unknown>[] = [];
  if (head) ops.push(zk.remove(`${dir}/${head.name}`).catch(ignore(NO_NODE)));
  if (children.includes(WINDOW)) ops.push(zk.remove(`${dir}/${WINDOW}`).catch(ignore(NO_NODE)));
  await Promise.all(ops);
  return info;
}
