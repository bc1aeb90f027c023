/** The client leasehold's ZooKeeper backend adapts (client.ts), described by its shape. */

/** The node-zookeeper-client methods leasehold calls (structural: no import of the package). */
export interface ZookeeperClientLike {
  create(...args: never[]): unknown;
  remove(...args: never[]): unknown;
  getData(...args: never[]): unknown;
  getChildren(...args: never[]): unknown;
  exists(...args: never[]): unknown;
  transaction(...args: never[]): unknown;
  getState(...args: never[]): unknown;
  getSessionId(...args: never[]): unknown;
  getSessionTimeout(...args: never[]): unknown;
  on(...args: never[]): unknown;
}

export function isZookeeperClient(c: unknown): c is ZookeeperClientLike {
  const x = c as Record<string, unknown> | null;
  return (
    !!x &&
    typeof x === 'object' &&
    ['create', 'remove', 'getData', 'getChildren', 'exists', 'transaction', 'getState', 'on'].every(
      (m) => typeof x[m] === 'function',
    )
  );
}
