/**
 * How long the server keeps a silent connection, and so the locks on it. A session lock lives
 * as long as its server session; in a partition the server ends the session when its TCP
 * keepalives go unanswered: `tcp_keepalives_idle` seconds after the last packet it received from
 * the client, then 3 probes 1 s apart (the interval and count every leasehold connection sets).
 * The client counts a lease valid until the send time of its last answered statement (grant or
 * liveness probe) + the TTL, so a connection that carries leases must not be ended sooner:
 * its idle time is raised to the longest TTL (whole seconds, rounded up) of the leases it
 * carries, piggybacked on the grant or probe statement only when the value set is lower (a
 * parameter that is 0 otherwise: no extra round trip, nothing more on the server's hot path).
 * A connection with no lease on it keeps 5 s (a vanished client host loses its session within
 * ~8 s); a raised value stays until the connection goes back to the pool, where it is reset.
 *
 * Linux sends keepalive probes only on a socket with nothing unacknowledged: when the partition
 * swallows the client's ACK of a reply, the server retransmits instead, never probes, and gives
 * up only after `tcp_retries2` (~15 min). So `tcp_user_timeout` (PostgreSQL 12+; ms) is set with
 * the keepalives to the idle time + the probes, and raised with the idle time in the same
 * statement: the server ends the session once data it sent stays unacknowledged that long, counted
 * from its sending (after the statement it answers was sent: the same bound). With keepalives
 * Linux ends a session by it once a probe went unanswered past it: equal to idle + probes, the
 * two bounds agree. Servers before 12 have no such setting (skipped there).
 *
 * Linux refuses a TCP_KEEPIDLE above 32767 s (Postgres then keeps the old value): the value is
 * clamped there (the user timeout at 32770000 ms), and a lease's local validity is capped at
 * (send time of the last answered statement) + the clamped idle + 3 s − a margin, so the
 * client's belief never outlasts the server's. Unix-socket connections have no keepalives, no
 * user timeout (the server ignores both settings) and no partitions. Between a session-mode
 * pooler and the server the settings apply to the pooler's server connection; the client's own
 * link to the pooler is the pooler's keepalive settings'.
 */
import type { Conn } from './client.js';

/** `tcp_keepalives_idle` (s) of a connection that carries no lease (set when it is opened). */
export const BASE_IDLE_S = 5;
/** Linux's largest TCP_KEEPIDLE (s). */
export const MAX_IDLE_S = 32_767;
/** interval 1 s × count 3: the probes after the idle time, before the server gives up. */
export const PROBES_MS = 3_000;
/** Kept off the bound: timer granularity, clock rates. */
const MARGIN_MS = 1_000;

/**
 * A select-list expression that sets `tcp_user_timeout` to match a keepalive idle time of
 * `idleS` (an SQL int4 expression, seconds): idle + the probes, in ms. PostgreSQL 12+ only (an
 * older server has no such setting: '' there, never null, so it can sit in a CASE guard).
 */
export function userTimeout(idleS: string): string {
  return `CASE WHEN current_setting('server_version_num')::int >= 120000
        THEN set_config('tcp_user_timeout', ((${idleS}) * 1000 + ${PROBES_MS})::text, false) ELSE '' END`;
}

/** The idle time (s) a lease of `ttlMs` needs from its connection, clamped to Linux's maximum. */
export function idleFor(ttlMs: number): number {
  return Math.min(MAX_IDLE_S, Math.max(BASE_IDLE_S, Math.ceil(ttlMs / 1000)));
}

/** The idle time set on each connection of one backend, as far as answered statements say. */
export class Keepalives {
  private readonly idle = new WeakMap<Conn, number>();

  /**
   * The statement parameter for a lease of `ttlMs` on `conn`: the idle time to set, or '0' when
   * the connection's is already long enough (the usual case: no change, no work on the server).
   */
  need(conn: Conn, ttlMs: number): string {
    const want = idleFor(ttlMs);
    return want > (this.idle.get(conn) ?? BASE_IDLE_S) ? String(want) : '0';
  }

  /** A statement that carried `param` (from `need`) was answered: the server set it. */
  set(conn: Conn, param: string): void {
    if (param === '0') return;
    const s = Number(param);
    if (s > (this.idle.get(conn) ?? BASE_IDLE_S)) this.idle.set(conn, s);
  }

  /**
   * At least this long after the server received a statement (sent at or after the time it is
   * counted from), it keeps `conn`'s session, however silent the client: the idle time + the
   * probes − a margin.
   */
  boundMs(conn: Conn): number {
    return (this.idle.get(conn) ?? BASE_IDLE_S) * 1000 + PROBES_MS - MARGIN_MS;
  }
}
