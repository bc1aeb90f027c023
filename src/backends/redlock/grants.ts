/**
 * The attempts this process was granted, by key and token: which attempt id holds the lock on the
 * nodes and with which fence. Renewals and result writes then touch that attempt's copies only,
 * and a straggling copy of an earlier, failed attempt with the same token is never counted.
 * Entries go on release, on a refused renewal, and at the latest one TTL after the last grant or
 * renewal (a lease left to run out, e.g. runExclusive's window), so the map stays as small as the
 * set of live leases.
 */
import { randomBytes } from 'node:crypto';
import { ID_LEN } from './scripts.js';

export interface GrantEntry {
  readonly id: string;
  readonly fence: bigint;
  /** The highest fence counter any node reported for this attempt (≥ fence). */
  floor: bigint;
  /** performance.now() after which the lease has surely run out. */
  until: number;
  /** release() went to every node (after any late grant of this attempt on the same connection). */
  released?: boolean;
}

/** A fresh attempt id: ID_LEN hex characters. Not a secret (the token is). */
export const newAttemptId = (): string => randomBytes(ID_LEN / 2).toString('hex');

export class Grants {
  private readonly map = new Map<string, GrantEntry>();
  private sweepAt = 0;

  private static at(key: string, token: string): string {
    return `${key}\n${token}`;
  }

  get(key: string, token: string): GrantEntry | undefined {
    const e = this.map.get(Grants.at(key, token));
    if (e && e.until < performance.now()) {
      this.map.delete(Grants.at(key, token));
      return undefined;
    }
    return e;
  }

  /** The attempt id to match on the nodes: this attempt's, or '' (any attempt of the token). */
  idOf(key: string, token: string): string {
    return this.get(key, token)?.id ?? '';
  }

  add(key: string, token: string, id: string, fence: bigint, ttlMs: number): GrantEntry {
    const t = performance.now();
    const entry: GrantEntry = { id, fence, floor: fence, until: t + ttlMs };
    this.map.set(Grants.at(key, token), entry);
    if (t >= this.sweepAt) {
      this.sweepAt = t + 10_000;
      for (const [k, e] of this.map) if (e.until < t) this.map.delete(k);
    }
    return entry;
  }

  /** Is `id` the attempt this process holds `key` with? (A late copy of it may join the grant.) */
  holds(key: string, token: string, id: string): boolean {
    return this.get(key, token)?.id === id;
  }

  /** A node reported `counter` for attempt `id`. */
  saw(key: string, token: string, id: string, counter: bigint): void {
    const e = this.get(key, token);
    if (e?.id === id && counter > e.floor) e.floor = counter;
  }

  renewed(key: string, token: string, ttlMs: number, ok: boolean): void {
    const k = Grants.at(key, token);
    const e = this.map.get(k);
    if (!e) return;
    if (ok) e.until = Math.max(e.until, performance.now() + ttlMs);
    else this.map.delete(k);
  }

  /** The lease is being released: forget it (its late copies are deleted by that release). */
  released(key: string, token: string): void {
    const e = this.map.get(Grants.at(key, token));
    if (e) e.released = true;
    this.map.delete(Grants.at(key, token));
  }

  get size(): number {
    return this.map.size;
  }
}
