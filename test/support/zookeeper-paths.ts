/** The tree layout, as tests see it (from the backend's own encoder). */
import { lockNodes } from '../../src/backends/zookeeper/paths.js';

export { encodeKey } from '../../src/backends/zookeeper/paths.js';
export const lockNodesOf = (children: readonly string[]): string[] => lockNodes(children).map((n) => n.name);
