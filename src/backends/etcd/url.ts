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
  const m = /^(etcds?):\/\/([^/?#]*)([^?#]*)(?:\?([^#]*))?$/i.exec(url);
  const bad = (why: string) => new InvalidArgumentError(`fromUrl: ${why} in "${redactUrl(url)}"`);
  if (!m) throw bad('malformed etcd URL');
  const tls = m[1]!.toLowerCase() === 'etcds';
  let hostPart = m[2]!;
  let auth: EtcdUrl['auth'];
  const at = hostPart.lastIndexOf('@');
  if (at >= 0) {
    const info = hostPart.slice(0, at);
    hostPart = hostPart.slice(at + 1);
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
  const hosts = hostPart.split(',').map((h) => {
    const hm = HOST.exec(h.trim());
    if (!hm || (hm[2] !== undefined && (Number(hm[2]) < 1 || Number(hm[2]) > 65535))) throw bad(`bad member "${h}"`);
    return `${tls ? 'https' : 'http'}://${hm[1]}:${hm[2] ?? '2379'}`;
  });
  let namespace = m[3]!.replace(/^\//, '');
  try {
    namespace = decodeURIComponent(namespace);
  } catch {
    throw bad('malformed namespace');
  }
  let leaseTtl: string | undefined;
  for (const [k, v] of new URLSearchParams(m[4] ?? '')) {
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
