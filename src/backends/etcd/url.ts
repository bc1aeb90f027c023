/**
 * `etcd://` and `etcds://` URLs (fromUrl, the CLI). Several members are listed comma-separated,
 * which the WHATWG URL parser refuses, so they are parsed here:
 *
 *   etcd://127.0.0.1:2379                         one member, plain gRPC
 *   etcd://h1:2379,h2:2379,h3:2379                a cluster: the client fails over between them
 *   etcds://user:password@h1:2379,h2:2379/app/    TLS (system CAs), etcd auth, namespace `app/`
 *   etcd://h:2379?leaseTtl=5s                     the backend's lease TTL (default 10s)
 */
import { InvalidArgumentError } from '../../errors.js';
import { redactUrl } from '../../scrub.js';
import { leaseTtlMs } from './options.js';

export interface EtcdUrl {
  readonly hosts: string[];
  readonly auth?: { username: string; password: string };
  readonly namespace: string;
  readonly leaseTtl?: string;
}

const HOST = /^(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(?::(\d{1,5}))?$/i;

export function isEtcdUrl(url: string): boolean {
  return /^etcds?:\/\//i.test(url);
}

export function parseEtcdUrl(url: string): EtcdUrl {
  const bad = (why: string) => new InvalidArgumentError(`fromUrl: ${why} in "${redactUrl(url)}"`);
  const scheme = /^(etcds?):\/\//i.exec(url);
  if (!scheme) throw bad('malformed etcd URL');
  // the credentials end at the last `@` (as redactUrl sees them), not at the first `/`: a
  // password may hold a raw `/`, `?` or `#`, and a member cut out of one would quote it
  let rest = url.slice(scheme[0].length);
  let auth: EtcdUrl['auth'];
  const at = rest.lastIndexOf('@');
  if (at >= 0) {
    const info = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = info.indexOf(':');
    try {
      auth = {
        username: decodeURIComponent(colon < 0 ? info : info.slice(0, colon)),
        password: decodeURIComponent(colon < 0 ? '' : info.slice(colon + 1)),
      };
    } catch {
      throw bad('malformed credentials');
    }
  }
  const m = /^([^/?#]*)([^?#]*)(?:\?([^#]*))?$/.exec(rest);
  if (!m) throw bad('malformed etcd URL');
  const tls = scheme[1]!.toLowerCase() === 'etcds';
  const hostPart = m[1]!;
  const hosts = hostPart.split(',').map((h) => {
    const hm = HOST.exec(h.trim());
    if (!hm || (hm[2] !== undefined && (Number(hm[2]) < 1 || Number(hm[2]) > 65535))) throw bad(`bad member "${h}"`);
    return `${tls ? 'https' : 'http'}://${hm[1]}:${hm[2] ?? '2379'}`;
  });
  let namespace = m[2]!.replace(/^\//, '');
  try {
    namespace = decodeURIComponent(namespace);
  } catch {
    throw bad('malformed namespace');
  }
  let leaseTtl: string | undefined;
  for (const [k, v] of new URLSearchParams(m[3] ?? '')) {
    if (k !== 'leaseTtl') throw bad(`unknown parameter "${k}" (known: leaseTtl)`);
    if (leaseTtl !== undefined) throw bad('leaseTtl given twice');
    leaseTtl = v;
  }
  // checked here, before fromUrl makes a client: a bad value never costs a connection
  if (leaseTtl !== undefined) {
    try {
      leaseTtlMs(leaseTtl, 'leaseTtl');
    } catch (e) {
      throw bad((e as Error).message);
    }
  }
  return { hosts, namespace, ...(auth ? { auth } : {}), ...(leaseTtl !== undefined ? { leaseTtl } : {}) };
}
