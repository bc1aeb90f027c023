#!/usr/bin/env bash
# The main job on the embedded default: no server needed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null
exec npx tsx examples/demo.ts "$@"
