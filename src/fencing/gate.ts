/** In-memory fence check for a user's own service: reject writes carrying a stale fence. */
import { InvalidArgumentError, StaleFenceError } from '../errors.js';
import { checkKey } from '../validate.js';

export class FenceGate {
  private readonly highest = new Map<string, bigint>();

  /**
   * Accepts `fence` for `resource` if it is ≥ the highest seen (equal passes: the same holder
   * writing twice), records it, and throws StaleFenceError otherwise. Synchronous.
   */
  check(resource: string, fence: bigint): void {
    checkKey(resource, 'resource');
    if (typeof fence !== 'bigint' || fence < 0n) throw new InvalidArgumentError('fence must be a non-negative bigint');
    const top = this.highest.get(resource);
    if (top !== undefined && fence < top) throw new StaleFenceError(resource, fence, top);
    this.highest.set(resource, fence);
  }

  /** The highest fence accepted for `resource`, if any. */
  highestFor(resource: string): bigint | undefined {
    return this.highest.get(resource);
  }
}
