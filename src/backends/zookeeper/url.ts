/**
 * `zk://host:port[,host:port…][/chroot][?sessionTimeout=10s&root=/leasehold&suspendedIsLost=true]`
 * to a connection string and options. Parsed by hand: WHATWG URLs have one host.
 */
import { InvalidArgumentError } from '../../errors.js';
import { checkChroot, checkHost } from './hosts.js';
import type { ZookeeperConnectOptions } from './index.js';

export function parseZkUrl(url: string): { hosts: string; options: ZookeeperConnectOptions } {
  // checked on the whole URL, before it is cut at a `/`: a password with a raw `/` in it would
  // leave `user:pass` (part of it) as a host, quoted in the error
  if (url.includes('@')) throw new InvalidArgumentError('fromUrl: zk:// URLs take no user or password');
  const m = /^zk:\/\/([^/?#]*)([^?#]*)(\?[^#]*)?$/i.exec(url);
  if (!m) throw new InvalidArgumentError('fromUrl: a ZooKeeper URL looks like zk://host:port[,host:port…][/chroot]');
  const [, authority = '', chroot = '', query = ''] = m;
  // each host checked (a port is 1 to 65535), each given :2181 when it has no port
  const hosts = authority.split(',').map((h) => checkHost(h, 'fromUrl (zk://)'));
  const base = checkChroot(chroot, 'fromUrl (zk://)');
  const options: ZookeeperConnectOptions = {};
  for (const [k, v] of new URLSearchParams(query)) {
    if (k === 'sessionTimeout' || k === 'connectTimeout') options[k] = /^\d+$/.test(v) ? Number(v) : v;
    else if (k === 'root') options.root = v;
    else if (k === 'suspendedIsLost') {
      if (v !== 'true' && v !== 'false') throw new InvalidArgumentError('fromUrl: suspendedIsLost is true or false');
      options.suspendedIsLost = v === 'true';
    } else throw new InvalidArgumentError(`fromUrl: unknown zk:// parameter "${k}"`);
  }
  return { hosts: hosts.join(',') + base, options };
}
