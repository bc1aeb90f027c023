/**
 * Connection strings of the clients leasehold makes (`connectZookeeper`, `zk://`), checked before
 * any I/O: node-zookeeper-client takes a bad port to its socket, whose RangeError is thrown from
 * a timer (an uncaught exception: the process ends), and a bad chroot to an `assert`.
 */
import { InvalidArgumentError } from '../../errors.js';

/** A host name, an IPv4 address or a bracketed IPv6 address (refused below), then an optional `:port`. */
const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::([^:]*))?$/;

/** An absolute path of names made of `A-Za-z0-9_.:=-`, no `.` or `..`, no empty name, no trailing `/`. */
export function isZkPath(p: string): boolean {
  return /^(\/[A-Za-z0-9_.:=-]+)+$/.test(p) && !p.split('/').some((x) => x === '.' || x === '..');
}

/** Checks one `host[:port]`; the port is digits only, 1 to 65535. Returns it with `:2181` when it had none. */
export function checkHost(h: string, where: string): string {
  const m = HOST.exec(h);
  if (!m) throw new InvalidArgumentError(`${where}: "${h}" is not a host[:port]`);
  if (m[1]!.startsWith('[')) {
    // node-zookeeper-client splits a server at its first ':' and would dial a host named "["
    throw new InvalidArgumentError(
      `${where}: "${h}": node-zookeeper-client cannot connect to an IPv6 address; use a host name that resolves to it`,
    );
  }
  const port = m[2];
  if (port === undefined) return `${h}:2181`;
  if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)
    throw new InvalidArgumentError(`${where}: the port of "${h}" must be a number from 1 to 65535`);
  return h;
}

/** Checks a chroot (`''` or `'/'`: none). */
export function checkChroot(chroot: string, where: string): string {
  if (chroot === '' || chroot === '/') return '';
  if (!isZkPath(chroot))
    throw new InvalidArgumentError(
      `${where}: the chroot must be a path like /apps/locks (no empty name, no trailing /), got "${chroot}"`,
    );
  return chroot;
}

/**
 * `host[:port][,host[:port]…][/chroot]` → the servers (each with its port) and the chroot
 * (`''` for none).
 */
export function parseHosts(hosts: string, where: string): { servers: string; chroot: string } {
  const slash = hosts.indexOf('/');
  const list = slash < 0 ? hosts : hosts.slice(0, slash);
  const chroot = checkChroot(slash < 0 ? '' : hosts.slice(slash), where);
  if (list === '') throw new InvalidArgumentError(`${where}: no host before the chroot`);
  const servers = list.split(',').map((h) => checkHost(h, where));
  return { servers: servers.join(','), chroot };
}
