/**
 * Long fault-injection runs: `npx tsx scripts/torture.ts --backend redis --minutes 2 [--seed N]`.
 * The program is test/faults/torture.ts (type-checked with the tests); see docs/faults.md.
 */
import '../test/faults/torture.js';
