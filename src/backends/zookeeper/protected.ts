/**
 * Protected creates (Curator's "protection" mode) for the lock recipe (mutex.ts): every node we
 * create carries the holder's protection id (a digest of its token) in its name, so a create
 * whose reply was lost (a connection loss after the server made the node) can be found again
 * and reused, and a node nobody adopted is deleted instead of blocking the key while our
 * session lives.
 */
import type { ZkSession } from './client.js';
import { CONNECTION_LOSS, EPHEMERAL_SEQUENTIAL, NO_NODE, zkCode } from './protocol.js';
import { encodeData, lockNodes, LOCK_MARK } from './paths.js';

export const missing = (e: unknown) => zkCode(e) === NO_NODE;
export const ignore =
  (...codes: number[]) =>
  (e: unknown) => {
    if (!codes.includes(zkCode(e))) throw e;
  };

export class ProtectedCreates {
  /** Protection ids of creates whose outcome is unknown (digest → directory). */
  private readonly suspects = new Map<string, string>();
  /** Protection ids with a create in flight. */
  private readonly inflight = new Set<string>();

  constructor(private readonly zk: ZkSession) {}

  get hasSuspects(): boolean {
    return this.suspects.size > 0;
  }

  /**
   * The path of our node for `digest` in `dir`: one an earlier attempt created but never heard
   * back about, or a new one.
   */
  async node(dir: string, digest: string, value: string | undefined): Promise<string> {
    const earlier =
      this.suspects.get(digest) === dir && !this.inflight.has(digest) ? await this.findOurs(dir, digest) : null;
    if (!earlier) return this.create(dir, digest, value);
    this.suspects.delete(digest);
    return `${dir}/${earlier}`;
  }

  /**
   * Creates our node (its parents when missing). A create whose reply was lost is looked for by
   * its protection id once connected again, and reused; while its outcome is unknown the
   * protection id stays a suspect, which `sweep()` deletes unless an attempt adopts it.
   */
  private async create(dir: string, digest: string, value: string | undefined): Promise<string> {
    const data = encodeData(value === undefined ? { d: digest } : { d: digest, v: value });
    this.inflight.add(digest);
    this.suspects.set(digest, dir);
    try {
      for (let i = 0; ; i++) {
        try {
          const path = await this.zk.create(`${dir}/${digest}${LOCK_MARK}`, data, EPHEMERAL_SEQUENTIAL);
          this.suspects.delete(digest);
          return path;
        } catch (e) {
          const code = zkCode(e);
          if (code === NO_NODE && i < 8) {
            await this.zk.mkdirp(dir); // the directory was never made, or removed when it emptied
            continue;
          }
          if (code !== CONNECTION_LOSS) {
            this.suspects.delete(digest); // refused: nothing was created (or its session is gone)
            throw e;
          }
          if (i >= 8) throw e;
          // the create may have happened: find it by its protection id once connected again
          await this.zk.whenConnected();
          const found = await this.findOurs(dir, digest);
          if (found) {
            this.suspects.delete(digest);
            return `${dir}/${found}`;
          }
        }
      }
    } finally {
      this.inflight.delete(digest);
    }
  }

  /**
   * Deletes the nodes of creates whose outcome was never learned (a lost reply, then the caller
   * gave up): no orphan stays in line to block the key while our session lives. `adopted` names
   * the node an attempt took over for a protection id, if any: it stays.
   */
  async sweep(adopted: (digest: string) => string | undefined): Promise<void> {
    for (const [digest, dir] of [...this.suspects]) {
      if (this.inflight.has(digest)) continue;
      const kept = adopted(digest);
      try {
        const { children } = await this.zk.getChildren(dir);
        for (const n of lockNodes(children)) {
          if (n.digest !== digest || this.inflight.has(digest)) continue;
          if (kept === n.name) continue;
          await this.zk.remove(`${dir}/${n.name}`).catch(ignore(NO_NODE));
        }
        this.suspects.delete(digest);
      } catch (e) {
        if (missing(e)) this.suspects.delete(digest);
      }
    }
  }

  private async findOurs(dir: string, digest: string): Promise<string | null> {
    try {
      const { children } = await this.zk.getChildren(dir);
      return lockNodes(children).find((n) => n.digest === digest)?.name ?? null;
    } catch (e) {
      if (missing(e)) return null;
      throw e;
    }
  }
}
