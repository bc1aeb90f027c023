/**
 * Deadlines of the engine's bounded calls and races, on one Node timer for the whole process
 * instead of a `setTimeout` per call. A Node `Timeout` is the costliest part of a bounded call
 * that answers in time (each one is an async resource, inserted into and taken out of the timer
 * lists, ~40 % of the engine's CPU per acquire+release); here a deadline is two pointers in a
 * list per bound (calls with the same bound finish in order, so each list stays sorted).
 *
 * The timer is ref'd while any deadline is pending (a call whose client never answers keeps the
 * process alive until its bound rejects it, as a `setTimeout` would), unref'd otherwise.
 *
 * Deadlines fire one turn of the event loop after their timer, from `setImmediate`: Node runs the
 * timers that fell due while the loop was blocked (a long synchronous task, a GC pause) before it
 * reads the sockets, so an answer that arrived during the stall, before its call's bound, would
 * otherwise be timed out while it waits to be read (a renewal given up, its lease lost and
 * released, though the server had renewed it). The deferred tick looks at the lists again: a call
 * whose answer was read meanwhile has left them.
 */
const now = (): number => performance.now();

/** The longest bound Node's timers take (a longer one is clamped, as `setTimeout` does). */
const MAX_MS = 2_147_483_647;

/** Something with a deadline: `fire()` runs once it passes, unless it was removed first. */
export abstract class Timed {
  /** @internal monotonic time it is due */
  dueAt = 0;
  /** @internal */
  prevT: Timed | null = null;
  /** @internal */
  nextT: Timed | null = null;
  /** @internal the list it is in (null: not scheduled) */
  listT: TimedList | null = null;
  abstract fire(): void;
}

class TimedList {
  head: Timed | null = null;
  tail: Timed | null = null;
}

class Deadlines {
  private readonly lists = new Map<number, TimedList>();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private count = 0;
  /** The deferred tick (see the header): pending between the timer and the next check phase. */
  private immediate: NodeJS.Immediate | null = null;
  private readonly onTimer = () => {
    this.timer = null;
    this.timerAt = Infinity;
    this.immediate ??= setImmediate(this.onImmediate);
  };
  private readonly onImmediate = () => {
    this.immediate = null;
    this.tick();
  };

  /** Schedules `t` to fire after `ms` (0 … 2^31-1; it must not be scheduled already). */
  add(t: Timed, ms: number): void {
    const bound = ms > 0 ? Math.min(ms, MAX_MS) : 0;
    const due = now() + bound;
    let l = this.lists.get(bound);
    if (!l) this.lists.set(bound, (l = new TimedList()));
    t.dueAt = due;
    t.listT = l;
    t.prevT = l.tail;
    t.nextT = null;
    if (l.tail) l.tail.nextT = t;
    else l.head = t;
    l.tail = t;
    if (this.count++ === 0) this.timer?.ref();
    if (due < this.timerAt) this.arm(due);
  }

  /** Unschedules `t` (nothing if it is not scheduled). */
  remove(t: Timed): void {
    const l = t.listT;
    if (!l) return;
    if (t.prevT) t.prevT.nextT = t.nextT;
    else l.head = t.nextT;
    if (t.nextT) t.nextT.prevT = t.prevT;
    else l.tail = t.prevT;
    t.listT = t.prevT = t.nextT = null;
    if (--this.count === 0) this.timer?.unref();
  }

  private arm(at: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(this.onTimer, Math.max(0, Math.ceil(at - now())));
    if (this.count === 0) this.timer.unref();
  }

  private tick(): void {
    const t = now();
    const due: Timed[] = [];
    for (const [bound, l] of this.lists) {
      while (l.head && l.head.dueAt <= t) {
        const e = l.head;
        this.remove(e);
        due.push(e);
      }
      if (!l.head) this.lists.delete(bound);
    }
    if (due.length > 1) due.sort((a, b) => a.dueAt - b.dueAt);
    for (const e of due) {
      try {
        e.fire();
      } catch (err) {
        process.nextTick(() => {
          throw err; // as an exception in a setTimeout callback would be
        });
      }
    }
    let next = Infinity;
    for (const l of this.lists.values()) if (l.head && l.head.dueAt < next) next = l.head.dueAt;
    if (next < this.timerAt) this.arm(next);
  }
}

/** The process's deadlines (one timer). */
export const deadlines = new Deadlines();

class Callback extends Timed {
  constructor(private readonly fn: () => void) {
    super();
  }
  fire(): void {
    this.fn();
  }
}

/** Calls `fn` after `ms` unless `cancel`led first: a `setTimeout` on the shared timer. */
export function after(ms: number, fn: () => void): Timed {
  const t = new Callback(fn);
  deadlines.add(t, ms);
  return t;
}

export function cancel(t: Timed): void {
  deadlines.remove(t);
}
