#!/usr/bin/env bash
# The format check, lint and dependency rules, side by side (one core each). Needs the build
# (`npx tsc -b`): the lint's typed rules read the packages' declarations.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
status=0
npm run -s format:check > "$out" 2>&1 &
prettier=$!
npm run -s lint || status=$?
wait "$prettier" || status=$?
cat "$out"
rm -f "$out"
exit "$status"
