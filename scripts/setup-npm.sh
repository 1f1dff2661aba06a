#!/usr/bin/env bash
# `npm ci` once per package-lock.json: a stamp in node_modules/ names the lock file's hash, so
# re-runs cost nothing until the dependencies change.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stamp="node_modules/.memlens-npm-ci-$(sha1sum package-lock.json | cut -c1-12)"
if [ -f "$stamp" ]; then
  exit 0
fi
echo "npm: npm ci (package-lock.json changed or node_modules is missing)" >&2
npm ci --no-audit --no-fund --loglevel=error
touch "$stamp"
