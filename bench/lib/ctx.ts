/** What every section gets from the runner. */
export interface Ctx {
  readonly quick: boolean;
  /** Unique per run; every key the bench writes contains `bench:<runId>:` so it can be purged. */
  readonly runId: string;
  log(line: string): void;
  /**
   * Aborted when the section runs past its time budget: the runner then kills the processes and
   * closes the clients it started (lib/scope.ts); a section's loops stop at their next step.
   */
  readonly signal: AbortSignal;
}
