/**
 * Keeping secrets out of what leasehold hands back: errors (and their causes), events, messages.
 * Client errors are never kept as they are: ioredis attaches the command's arguments (a lease
 * token) to every reply error, postgres.js attaches the query's parameters, and a client's
 * options (a password) hang off many of its objects. `scrubError` keeps what helps to debug
 * (name, message, codes, stack) and drops everything else. Shared by the engine and the backends.
 */
import { LeaseholdError } from './errors.js';

/** Fields of a client error that are kept: codes and network details, never values. */
const SAFE_FIELDS = ['code', 'errno', 'syscall', 'address', 'port', 'severity', 'routine', 'sqlState'] as const;
const MAX_DEPTH = 6;

const PASSWORD_PARAM = /([?&;](?:password|pass|pwd|sslpassword|auth)=)[^&#;\s]*/gi;

/**
 * Hides the credentials of a connection URL: everything between the scheme and the last `@`.
 * Not a pattern that stops at the first `/`, `#` or `?`: a password may hold those raw (then
 * the URL does not even parse), and so does the hidden part here. An `@` in the path or query
 * makes it hide more than the credentials — it over-redacts rather than leak. Password query
 * parameters (`?password=…`) are hidden as well.
 */
export function redactUrl(url: string): string {
  if (typeof url !== 'string') return '***';
  const m = /^[a-z][a-z0-9+.-]*:(\/\/)?/i.exec(url);
  const scheme = m ? m[0] : '';
  const rest = url.slice(scheme.length);
  const lastAt = rest.lastIndexOf('@');
  const out = lastAt < 0 ? url : `${scheme}***${rest.slice(lastAt)}`;
  return out.replace(PASSWORD_PARAM, '$1***');
}

/** The secrets a URL carries (its password, raw and decoded), for `redactText`. */
export function secretsOfUrl(url: string): string[] {
  if (typeof url !== 'string') return [];
  const out = new Set<string>();
  const m = /^[a-z][a-z0-9+.-]*:(\/\/)?/i.exec(url);
  const rest = url.slice(m ? m[0].length : 0);
  const lastAt = rest.lastIndexOf('@');
  if (lastAt >= 0) {
    const info = rest.slice(0, lastAt);
    const colon = info.indexOf(':');
    out.add(colon < 0 ? info : info.slice(colon + 1));
  }
  for (const p of url.matchAll(PASSWORD_PARAM)) out.add(p[0].slice(p[1]!.length));
  for (const s of [...out]) {
    try {
      out.add(decodeURIComponent(s));
    } catch {
      // not percent-encoded: the raw form is enough
    }
  }
  out.add(url);
  return [...out].filter((s) => s.length >= 3);
}

/** `text` with every secret replaced by `***`, and the password of any URL in it hidden. */
export function redactText(text: string, secrets: readonly string[] = []): string {
  let out = text;
  // longest first, so a secret that contains another is hidden whole
  for (const s of [...secrets].sort((a, b) => b.length - a.length)) {
    if (s.length >= 3 && out.includes(s)) out = out.split(s).join('***');
  }
  return out.replace(/\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>]*/gi, (u) => redactUrl(u));
}

/**
 * An error's name, or its class's when it left `name` at Error's (etcd3's GRPCUnavailableError and
 * friends do): the copy keeps what the error is, for readers and for the transient allow-list.
 */
function className(e: Error): string {
  const ctor = (e as { constructor?: unknown }).constructor;
  if (e.name !== 'Error' || typeof ctor !== 'function' || ctor === Error) return String(e.name);
  return typeof ctor.name === 'string' && ctor.name.length > 0 ? ctor.name : String(e.name);
}

/**
 * A copy of a client error that is safe to keep, throw and publish: name, message, stack, codes
 * (`code`, `errno`, `syscall`, SQLSTATE `severity`, ...), its `cause` and the `errors` of an
 * AggregateError, each scrubbed the same way; every other field (command arguments, query
 * parameters, client options) is dropped, and each secret is cut out of the text. A
 * LeaseholdError is scrubbed in place (it is ours: its class and identity are kept).
 */
export function scrubError(e: unknown, secrets: readonly string[] = []): Error {
  return scrub(e, secrets, 0, new Map()) as Error;
}

function scrub(e: unknown, secrets: readonly string[], depth: number, seen: Map<unknown, Error>): Error {
  if (!(e instanceof Error)) {
    return new Error(redactText(typeof e === 'string' ? e : `non-error thrown: ${describe(e)}`, secrets));
  }
  const done = seen.get(e);
  if (done) return done;
  if (e instanceof LeaseholdError) {
    seen.set(e, e);
    const w = e as unknown as Record<string, unknown>;
    e.message = redactText(e.message, secrets);
    if (typeof e.stack === 'string') e.stack = redactText(e.stack, secrets);
    if ('cause' in e && e.cause !== undefined) {
      w.cause = depth < MAX_DEPTH ? scrub(e.cause, secrets, depth + 1, seen) : undefined;
    }
    if (Array.isArray(w.causes)) {
      w.causes = (w.causes as unknown[]).map((c) => (c == null ? c : scrub(c, secrets, depth + 1, seen)));
    }
    return e;
  }
  const copy = new Error(redactText(String(e.message), secrets));
  seen.set(e, copy);
  Object.defineProperty(copy, 'name', { value: redactText(className(e), secrets), configurable: true });
  copy.stack = typeof e.stack === 'string' ? redactText(e.stack, secrets) : copy.stack;
  const from = e as unknown as Record<string, unknown>;
  const to = copy as unknown as Record<string, unknown>;
  for (const f of SAFE_FIELDS) {
    const v = from[f];
    if (typeof v === 'string') to[f] = redactText(v, secrets);
    else if (typeof v === 'number' || typeof v === 'boolean') to[f] = v;
  }
  const command = from.command as { name?: unknown } | undefined;
  if (command && typeof command.name === 'string') to.command = command.name; // the name only, never args
  if (depth < MAX_DEPTH) {
    if (e.cause !== undefined) to.cause = scrub(e.cause, secrets, depth + 1, seen);
    if (e instanceof AggregateError && Array.isArray(e.errors)) {
      to.errors = e.errors.map((x: unknown) => scrub(x, secrets, depth + 1, seen));
    }
  }
  return copy;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'object') return Object.prototype.toString.call(v);
  return typeof v === 'symbol' ? 'symbol' : String(v).slice(0, 200);
}
