#!/usr/bin/env bash
# Create .venv at the repository root with torch (CPU build), the test tools and memlens itself
# (editable). Re-running is quick: nothing is reinstalled unless the requirements changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
req=python/requirements-dev.txt
stamp=.venv/.memlens-setup-$(cat "$req" python/pyproject.toml | sha1sum | cut -c1-12)
if [ -f "$stamp" ]; then
  exit 0
fi
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10), "memlens needs Python 3.10 or newer"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r "$req"
# setuptools' notes about editable installs are noise here; show them only if the install fails.
.venv/bin/python -m pip install --quiet --no-deps -e python 2>.venv/editable-install.log \
  || { cat .venv/editable-install.log; exit 1; }
rm -f .venv/.memlens-setup-*
touch "$stamp"
echo "python environment ready: .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
