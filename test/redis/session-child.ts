/**
 * A holder process of the Redis session tests (test/redis/session.test.ts), in session mode.
 *   hold <url> <prefix> <key:ttlMs,...>   acquires every key with its TTL (renewed); prints
 *                                         {kind:'held', fences, sessions} then one
 *                                         {kind:'lost', key, reason} per lease it loses
 *   exclusive <url> <prefix> <key> <atLeastMs> <atMostMs>
 *                                         runExclusive(key) with lockAtLeastFor; prints {kind:'ran'}
 * It stays up until the parent kills it (SIGSTOP / SIGCONT / SIGKILL).
 */
import { Redis } from 'ioredis';
import { redis } from '../../src/backends/redis/index.js';
import { createLocks, LeaseLostError } from '../../src/index.js';

const say = (m: object) =>
  process.stdout.write(JSON.stringify(m, (_, v) => (typeof v === 'bigint' ? String(v) : v)) + '\n');

const [role, url, prefix, spec, atLeast, atMost] = process.argv.slice(2);
const client = new Redis(url!, { maxRetriesPerRequest: 1 });
const locks = createLocks(redis(client, { session: true }), { prefix: prefix! });

if (role === 'hold') {
  const wanted = spec!.split(',').map((s) => {
    const [key, ttl] = s.split(':');
    return { key: key!, ttl: Number(ttl) };
  });
  const leases = await Promise.all(wanted.map((w) => locks.acquire(w.key, { ttl: w.ttl, wait: '10s' })));
  const sessions: Record<string, string> = {};
  for (const w of wanted) {
    const v = await client.get(`{${prefix}:${w.key}}`);
    sessions[w.key] = v?.split('|')[1] ?? '';
  }
  for (const l of leases) {
    l.signal.addEventListener('abort', () => {
      const r = l.signal.reason;
      say({ kind: 'lost', key: l.key, reason: r instanceof LeaseLostError ? r.message : String(r) });
    });
  }
  say({ kind: 'held', fences: Object.fromEntries(leases.map((l) => [l.key, l.fence])), sessions });
} else if (role === 'exclusive') {
  const r = await locks.runExclusive(spec!, () => 'done', {
    lockAtLeastFor: Number(atLeast),
    lockAtMostFor: Number(atMost),
  });
  say({ kind: 'ran', ran: r.ran });
}
setInterval(() => {}, 60_000); // stays up until killed
