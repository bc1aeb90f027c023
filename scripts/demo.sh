#!/usr/bin/env bash
# `leasehold demo` from a fresh clone: installs what is missing (npm ci compiles better-sqlite3,
# the embedded default, about 1.5 minutes when no prebuilt binary can be downloaded), builds the
# CLI if the build is missing or older than the sources, then runs the demo. No server needed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null
if [ ! -f dist/cli/index.js ] || [ -n "$(find src package.json tsup.config.ts -newer dist/cli/index.js -print -quit)" ]; then
  npm run build >/dev/null
fi
exec node dist/cli/index.js demo "$@"
