/**
 * The session states the backend reports (Curator's) and the `leasehold:zookeeper` diagnostics
 * channel that carries them, with each watch event the backend receives.
 */
import { channel } from 'node:diagnostics_channel';

/** Curator's connection states. */
export type SessionState = 'CONNECTED' | 'SUSPENDED' | 'RECONNECTED' | 'LOST';

/** `leasehold:zookeeper` messages: session states, and each watch event the backend receives. */
export interface ZookeeperEvent {
  backend: 'zookeeper';
  /** A session state change, or 'watch' (a watch fired: predecessor, window, children). */
  type: SessionState | 'watch';
  /** The session (hex), for session states. */
  session?: string;
  /** For 'watch': what was watched and which lock. */
  watch?: 'predecessor' | 'children' | 'window';
  key?: string;
}

export const zkChannel = channel('leasehold:zookeeper');
export const publish = (m: ZookeeperEvent): void => {
  if (zkChannel.hasSubscribers) zkChannel.publish(m);
};
