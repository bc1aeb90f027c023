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
# one plain closing line: "tests: N passed, N failed, N skipped"
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const skipped = r.numPendingTests + (r.numTodoTests ?? 0);
  console.log(`tests: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
' "$report" 2>/dev/null || true
exit "$status"
