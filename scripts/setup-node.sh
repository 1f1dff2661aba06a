#!/usr/bin/env bash
# Node.js and npm for building and testing the extension (the machine's own; code-server's Node 24
# is separate, see setup-node24.sh). Installs Debian's nodejs and npm only when either is
# missing or Node is older than 18. Idempotent and quiet when all is there.
set -euo pipefail

ok() {
  command -v node >/dev/null && command -v npm >/dev/null || return 1
  local major
  major="$(node -p 'process.versions.node.split(".")[0]')"
  [ "$major" -ge 18 ]
}

if ok; then
  exit 0
fi
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "node: installing Debian's nodejs and npm" >&2
"${sudo[@]}" apt-get update -qq >&2 || echo "node: apt-get update failed; trying the lists at hand" >&2
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends nodejs npm >&2
ok || { echo "node: Node 18 or newer and npm are needed; found $(node --version 2>/dev/null || echo none)" >&2; exit 1; }
