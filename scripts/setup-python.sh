#!/usr/bin/env bash
# Create a virtual environment (default .venv at the repository root) with torch, the test tools
# and memlens itself (editable). Re-running is quick: nothing is reinstalled unless the
# requirements changed.
#   VENV=.venv-cuda TORCH=torch==2.14.1 scripts/setup-python.sh   # the CUDA build of torch
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
req=python/requirements-dev.txt
# The torch line of the requirements unless TORCH names another one.
torch_req=${TORCH:-$(grep '^torch==' "$req")}
stamp=$VENV/.memlens-setup-$( (cat "$req" python/pyproject.toml; echo "$torch_req") | sha1sum | cut -c1-12)
if [ -f "$stamp" ]; then
  exit 0
fi
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "memlens needs Python 3.11 or newer"'
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# Another torch (TORCH=...) brings the Triton its wheel pins: the requirements' one is left out.
skip='^torch=='
[ -z "${TORCH:-}" ] || skip='^torch==\|^triton=='
# DeepSpeed is an sdist whose setup.py imports torch: it is built after the rest, against the
# torch installed here (pip's build isolation would download another torch), without its ops
# (DS_BUILD_OPS=0: they are compiled on first use, and memlens replaces them).
"$VENV/bin/python" -m pip install --quiet "$torch_req" -r <(grep -v "$skip\|^deepspeed==" "$req")
ds_req=$(grep '^deepspeed==' "$req" || true)
[ -z "$ds_req" ] || DS_BUILD_OPS=0 "$VENV/bin/python" -m pip install --quiet \
  --no-build-isolation "$ds_req"
# setuptools' notes about editable installs are noise here; show them only if the install fails.
"$VENV/bin/python" -m pip install --quiet --no-deps -e python 2>"$VENV/editable-install.log" \
  || { cat "$VENV/editable-install.log"; exit 1; }
rm -f "$VENV"/.memlens-setup-*
touch "$stamp"
echo "python environment ready: $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
