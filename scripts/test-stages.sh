#!/usr/bin/env bash
# `make test`'s stages one after another, each one's wall time printed as it ends and all of
# them again at the end (also when one fails): CI has 90 minutes, and this says where they go.
#   scripts/test-stages.sh setup test-python test-ts test-webview test-e2e
# MEMLENS_STAGE_TIMES=FILE also writes the table ("stage seconds" lines) to FILE.
set -uo pipefail
cd "$(dirname "$0")/.."
declare -a names=() seconds=()
total_start=$SECONDS
summary() {
  echo
  echo "test stages (wall time):"
  for i in "${!names[@]}"; do printf '  %-14s %6d s\n' "${names[$i]}" "${seconds[$i]}"; done
  printf '  %-14s %6d s\n' total $((SECONDS - total_start))
  if [ -n "${MEMLENS_STAGE_TIMES:-}" ]; then
    for i in "${!names[@]}"; do echo "${names[$i]} ${seconds[$i]}"; done >"$MEMLENS_STAGE_TIMES"
  fi
}
for stage in "$@"; do
  start=$SECONDS
  make --no-print-directory "$stage"
  status=$?
  names+=("$stage"); seconds+=($((SECONDS - start)))
  echo "== stage $stage: ${seconds[-1]} s"
  if [ $status -ne 0 ]; then
    summary
    exit $status
  fi
done
summary
