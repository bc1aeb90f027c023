/**
 * `zk://host:port[,host:port…][/chroot][?sessionTimeout=10s&root=/leasehold&suspendedIsLost=true]`
 * to a connection string and options. Parsed by hand: WHATWG URLs have one host.
 */
import { InvalidArgumentError } from '../../errors.js';
import type { ZookeeperConnectOptions } from './index.js';

const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?$/;

export function parseZkUrl(url: string): { hosts: string; options: ZookeeperConnectOptions } {
  const m = /^zk:\/\/([^/?#]*)([^?#]*)(\?[^#]*)?$/i.exec(url);
  if (!m) throw new InvalidArgumentError('fromUrl: a ZooKeeper URL looks like zk://host:port[,host:port…][/chroot]');
  const [, authority = '', chroot = '', query = ''] = m;
  if (authority.includes('@')) throw new InvalidArgumentError('fromUrl: zk:// URLs take no user or password');
  const hosts = authority.split(',');
  for (const h of hosts) {
    if (!HOST.test(h)) throw new InvalidArgumentError(`fromUrl: "${h}" is not a host[:port] in a zk:// URL`);
  }
  if (
    chroot !== '' &&
    chroot !== '/' &&
    (!/^(\/[A-Za-z0-9_.:=-]+)+$/.test(chroot) || chroot.split('/').some((p) => p === '.' || p === '..'))
  )
    throw new InvalidArgumentError('fromUrl: the chroot of a zk:// URL must be a path like /apps/locks');
  const options: ZookeeperConnectOptions = {};
  for (const [k, v] of new URLSearchParams(query)) {
    if (k === 'sessionTimeout' || k === 'connectTimeout') options[k] = /^\d+$/.test(v) ? Number(v) : v;
    else if (k === 'root') options.root = v;
    else if (k === 'suspendedIsLost') {
      if (v !== 'true' && v !== 'false') throw new InvalidArgumentError('fromUrl: suspendedIsLost is true or false');
      options.suspendedIsLost = v === 'true';
    } else throw new InvalidArgumentError(`fromUrl: unknown zk:// parameter "${k}"`);
  }
  const withPorts = hosts.map((h) => (/:\d+$/.test(h) && !h.endsWith(']') ? h : `${h}:2181`)).join(',');
  return { hosts: withPorts + (chroot === '/' ? '' : chroot), options };
}
