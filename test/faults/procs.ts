/**
 * Contender processes: `child_process.fork` of worker.ts with `--import tsx`, reused across
 * scenarios (a fork costs ~0.7s of CPU on this machine). Every process is checked to share the
 * harness's monotonic clock before it is used, and is SIGKILLed when the harness exits.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { clock, type FromWorker, sleep, type ToWorker, type WorkerConfig } from './types.js';

const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));
const all = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of all) {
    try {
      c.kill('SIGCONT');
      c.kill('SIGKILL');
    } catch {
      /* gone */
    }
  }
});

export class WorkerProc {
  paused = false;
  dead = false;
  /** The logical process it runs now (-1: idle). */
  p = -1;
  onMessage: ((m: FromWorker) => void) | null = null;
  private constructor(readonly child: ChildProcess) {
    child.on('message', (m: FromWorker) => this.onMessage?.(m));
    child.on('exit', () => {
      this.dead = true;
      all.delete(child);
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  static async spawn(): Promise<WorkerProc> {
    const child = fork(WORKER, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    all.add(child);
    const w = new WorkerProc(child);
    await w.next('ready', 30_000);
    // one clock: the child's reading must fall between our send and our receipt
    for (let i = 0; i < 3; i++) {
      const before = clock();
      w.send({ kind: 'ping' });
      const pong = (await w.next('pong', 5000)) as Extract<FromWorker, { kind: 'pong' }>;
      const after = clock();
      if (pong.t < before || pong.t > after) {
        w.kill();
        throw new Error(`worker clock ${pong.t} is outside [${before}, ${after}]: no shared monotonic clock`);
      }
    }
    return w;
  }

  private next(kind: FromWorker['kind'], timeoutMs: number): Promise<FromWorker> {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.child.off('message', on);
        reject(new Error(`worker ${this.pid}: no '${kind}' within ${timeoutMs}ms`));
      }, timeoutMs);
      const on = (m: FromWorker) => {
        if (m.kind !== kind) return;
        clearTimeout(t);
        this.child.off('message', on);
        resolve(m);
      };
      this.child.on('message', on);
    });
  }

  send(m: ToWorker): void {
    if (!this.dead && this.child.connected) this.child.send(m);
  }

  run(p: number, config: WorkerConfig): void {
    this.p = p;
    this.send({ kind: 'run', p, config });
  }

  /** Asks the loop to stop; resolves true once it has closed its clients. */
  async halt(timeoutMs: number): Promise<boolean> {
    if (this.dead) return false;
    const done = Promise.race([this.next('halted', timeoutMs), this.next('fatal', timeoutMs)]).then(
      () => true,
      () => false,
    );
    this.send({ kind: 'halt' });
    const ok = await done;
    if (ok) this.p = -1;
    return ok;
  }

  stop(): void {
    if (!this.dead) this.child.kill('SIGSTOP');
    this.paused = true;
  }

  cont(): void {
    if (!this.dead) this.child.kill('SIGCONT');
    this.paused = false;
  }

  kill(): void {
    if (this.dead) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
    this.dead = true;
  }
}

/** Idle workers, reused by the next scenario. */
export class Pool {
  private readonly idle: WorkerProc[] = [];
  private spawning: Promise<WorkerProc>[] = [];

  /** Starts `n` more in the background (so a killed worker's replacement is ready at once). */
  warm(n: number): void {
    for (let i = 0; i < n; i++) {
      const s = WorkerProc.spawn();
      this.spawning.push(s);
      s.then(
        (w) => {
          this.spawning = this.spawning.filter((x) => x !== s);
          this.idle.push(w);
        },
        () => {
          this.spawning = this.spawning.filter((x) => x !== s);
        },
      );
    }
  }

  async take(): Promise<WorkerProc> {
    for (;;) {
      const w = this.idle.shift();
      if (!w) break;
      if (!w.dead) return w;
    }
    if (this.spawning.length > 0) {
      await Promise.race(this.spawning).catch(() => {});
      await sleep(0);
      return this.take();
    }
    return WorkerProc.spawn();
  }

  give(w: WorkerProc): void {
    if (!w.dead && w.p === -1) this.idle.push(w);
    else w.kill();
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.spawning);
    for (const w of this.idle.splice(0)) w.kill();
  }
}
