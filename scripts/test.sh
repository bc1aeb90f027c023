#!/usr/bin/env bash
# The whole test suite: installs dependencies if needed, starts the services, runs every test
# against the real servers. Extra arguments go to vitest (e.g. a file or -t "name").
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund
bash scripts/services.sh
report=$(mktemp)
trap 'rm -f "$report"' EXIT
status=0
npx vitest run --reporter=default --reporter=json --outputFile.json="$report" "$@" || status=$?
# one plain closing line: "tests: N passed, N failed, N skipped". A file that crashed (an import
# or a hook failed: its tests never ran) counts as failed, with each test it did not run; no
# report at all (vitest itself crashed) is a failure too.
node -e '
  let r;
  try {
    r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  } catch {
    console.log("tests: 0 passed, 1 failed, 0 skipped (no test report: the run crashed)");
    process.exit(1);
  }
  let failed = r.numFailedTests;
  let skipped = r.numPendingTests + (r.numTodoTests ?? 0);
  const crashed = [];
  for (const f of r.testResults ?? []) {
    if (f.status !== "failed" || !f.message) continue; // a failure outside any test
    const notRun = f.assertionResults.filter((a) => a.status !== "passed" && a.status !== "failed").length;
    crashed.push(f.name);
    failed += Math.max(1, notRun);
    skipped -= notRun;
  }
  let extra = crashed.length ? ` (${crashed.length} file(s) crashed: ${crashed.map((n) => n.replace(process.cwd() + "/", "")).join(", ")})` : "";
  // every test passed yet the run failed: vitest saw an error outside any test (an unhandled
  // rejection or exception); it is printed above as "Unhandled Rejection"/"Unhandled Error"
  if (failed === 0 && r.success === false) extra += " (the run failed: an unhandled error outside any test, printed above)";
  console.log(`tests: ${r.numPassedTests} passed, ${failed} failed, ${skipped} skipped${extra}`);
  process.exit(failed > 0 || r.success === false ? 1 : 0);
' "$report" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
