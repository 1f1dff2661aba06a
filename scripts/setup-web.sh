#!/usr/bin/env bash
# The TypeScript side's set-up: npm dependencies (npm ci, skipped while package-lock.json is
# unchanged) and Debian's Chromium, which the panel's browser tests and benchmark drive.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=node_modules/.memlens-setup-$(sha1sum package-lock.json | cut -c1-12)
if [ ! -f "$stamp" ]; then
  npm ci --no-audit --no-fund
  touch "$stamp"
fi
if ! command -v "${CHROMIUM_PATH:-/usr/bin/chromium}" >/dev/null; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium
fi
