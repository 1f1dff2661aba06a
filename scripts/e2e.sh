#!/usr/bin/env bash
# The whole end-to-end run on a fresh machine (Debian, offline but for npm/PyPI/Debian):
# tools, dependencies, build, package, then the e2e tests in a real VS Code (code-server).
# Re-runs skip what is already installed. Prints how long each step took.
# Usage: scripts/e2e.sh            (artifacts: test/e2e/artifacts/)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

timings=()
summary() {
  local status=$?
  echo
  echo "== e2e.sh step timings =="
  printf '%s\n' "${timings[@]}" | tee test/e2e/artifacts/timings.txt
  [ "$status" -eq 0 ] && echo "== e2e.sh: OK ==" || echo "== e2e.sh: FAILED (exit $status) =="
}
mkdir -p test/e2e/artifacts
trap summary EXIT

step() {
  local name=$1
  shift
  echo
  echo "== $name: $*"
  local start=$SECONDS
  local rc=0
  "$@" || rc=$?
  timings+=("$(printf '%-18s %4ds%s' "$name" $((SECONDS - start)) "$([ $rc -eq 0 ] || echo "  FAILED ($rc)")")")
  return $rc
}

step setup-node scripts/setup-node.sh
step setup-python scripts/setup-python.sh
step setup-node24 scripts/setup-node24.sh
step setup-code-server scripts/setup-code-server.sh
step setup-web scripts/setup-web.sh
step package npm run package
step test:unit npm run test:unit
step test:e2e npm run test:e2e
