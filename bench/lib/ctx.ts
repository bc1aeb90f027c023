/** What every section gets from the runner. */
export interface Ctx {
  readonly quick: boolean;
  /** Unique per run; every key the bench writes contains `bench:<runId>:` so it can be purged. */
  readonly runId: string;
  log(line: string): void;
}
