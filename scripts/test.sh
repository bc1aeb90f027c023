#!/usr/bin/env bash
# The whole test suite: installs dependencies if needed, starts the services, runs every test
# against the real servers. Extra arguments go to vitest (e.g. a file or -t "name").
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund
bash scripts/services.sh
exec npx vitest run "$@"
