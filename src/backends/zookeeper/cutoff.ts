/**
 * close() on leasehold's own client with the server out of reach. The session ends with close()
 * and the server deletes its nodes with it (or expires it, when the goodbye never arrives), so
 * nothing close() sends needs to wait for a server that does not answer: once close() began, a
 * connection that is down, or a server silent for CLOSE_GRACE_MS while calls wait on it, fails
 * every call still waiting (CONNECTION_LOSS) and every later one. A caller's client is never cut
 * off: its session outlives close(), and so must the deletions of our nodes on it.
 */
import { CLOSE_GRACE_MS } from '../../cutoff.js';
import { CONNECTION_LOSS } from './protocol.js';

export const cutOffError = (): Error =>
  Object.assign(new Error('closing: the server did not answer'), { code: CONNECTION_LOSS });

export interface CutoffProbe {
  /** The connection is up. */
  connected(): boolean;
  /** When the server last sent anything (monotonic ms). */
  lastHeard(): number;
  /** Called once, when the server is given up (after the calls failed). */
  onCut(): void;
}

export class Cutoff {
  /** The server was given up. */
  cut = false;
  /** Calls waiting for a reply (their reject). */
  private readonly waiting = new Set<(e: unknown) => void>();
  private timer: NodeJS.Timeout | null = null;
  private started = 0;

  constructor(private readonly probe: CutoffProbe) {}

  /** A call waits for its reply (false: the server was given up already). */
  track(fail: (e: unknown) => void): boolean {
    if (this.cut) return false;
    this.waiting.add(fail);
    return true;
  }

  /** The call's reply came. */
  untrack(fail: (e: unknown) => void): void {
    this.waiting.delete(fail);
  }

  /** close() began: from now on a server out of reach is given up. */
  start(): void {
    if (this.timer || this.cut) return;
    this.started = performance.now();
    this.check();
    if (this.cut) return;
    this.timer = setInterval(() => this.check(), 50);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private check(): void {
    if (this.cut) return;
    if (this.probe.connected()) {
      if (this.waiting.size === 0) return;
      const heard = Math.max(this.probe.lastHeard(), this.started);
      if (performance.now() - heard <= CLOSE_GRACE_MS) return;
    }
    this.cut = true;
    this.stop();
    const calls = [...this.waiting];
    this.waiting.clear();
    for (const fail of calls) fail(cutOffError());
    this.probe.onCut();
  }
}
