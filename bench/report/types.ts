/** The shape of bench/results/<date>-<host>.json. */
import type { ContendedOptions, ContendedRun } from '../sections/contended.js';
import type { EtcdSection } from '../sections/etcd.js';
import type { PostgresSection } from '../sections/postgres.js';
import type { ZookeeperSection } from '../sections/zookeeper.js';
import type { RedlockResult } from '../sections/redlock.js';
import type { ScaleSection } from '../sections/scale.js';
import type { UncontendedResult } from '../sections/uncontended.js';

export interface Meta {
  date: string;
  host: string;
  command: string;
  quick: boolean;
  node: string;
  platform: string;
  cpus: number;
  cpuModel: string;
  loadAvgAtStart: number[];
  redisVersion: string;
  postgresVersion: string;
  packages: Record<string, string>;
  startedAt: string;
  durationMs: number;
  /** libraries considered and not run, with the reason */
  notRun: { name: string; reason: string }[];
  /** how each library was configured */
  settings: Record<string, string>;
}

export interface Goal {
  id: 'P1' | 'P2' | 'P3' | 'P4' | 'P5' | 'P6';
  title: string;
  target: string;
  /** the headline measured ratio (null when not measured) */
  ratio: number | null;
  /** every ratio and number the verdict used, in words */
  measured: string;
  /** null: not measured (a backend not ready, a section failed) */
  met: boolean | null;
  /** errors of the subjects the verdict compares (then met is false: the verdict is refused) */
  errors?: number;
  /** what a met verdict rests on when it is not a clear pass (P6: 'within the noise'); in the report beside it */
  qualifier?: string;
}

export interface Results {
  meta: Meta;
  goals: Goal[];
  uncontended?: UncontendedResult;
  contended?: { options: ContendedOptions; runs: ContendedRun[]; failures: { name: string; error: string }[] };
  redlock?: RedlockResult;
  scale?: ScaleSection;
  postgres?: PostgresSection;
  zookeeper?: ZookeeperSection;
  etcd?: EtcdSection;
  errors: { section: string; error: string }[];
}
