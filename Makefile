# Two commands on a fresh machine:
#   make demo   set everything up, trace the bundled example, print the report
#   make test   set everything up, run every test of the project
# and one to build the VS Code extension:
#   make vsix   out/torch-memory-lens.vsix (install it with "Extensions: Install from VSIX...")
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
VSIX := out/torch-memory-lens.vsix

.PHONY: demo test setup setup-system setup-python setup-node setup-npm setup-node24 \
	setup-code-server setup-e2e test-python test-ts test-e2e vsix build bench bench-ext clean

# -- set-up (each step is idempotent: quick when already done) -------------------------------
setup-python:
	@scripts/setup-python.sh

setup-system:
	@scripts/setup-system.sh

setup-node:
	@scripts/setup-node.sh

setup-npm: setup-node
	@scripts/setup-npm.sh

# code-server (a real VS Code) on Node 24, and Debian's Chromium: the e2e tests' VS Code
setup-node24: setup-node
	@scripts/setup-node24.sh >/dev/null

setup-code-server: setup-node24
	@scripts/setup-code-server.sh

setup-e2e: setup-python setup-npm setup-code-server

setup: setup-system setup-python

# -- build -------------------------------------------------------------------------------------
build: setup-npm
	npm run build

vsix: setup-npm
	npm run package

# -- tests -------------------------------------------------------------------------------------
demo: setup
	$(PY) -m memlens run --device cpu -- examples/gpt/train.py --batch-size 8

test: setup test-python test-ts test-e2e

test-python: setup-system setup-python
	$(PY) -m pytest python/tests -q

# Type checks and the unit tests of the TypeScript side (plain Node; the protocol mirror and
# the device list are compared with the Python side through .venv).
test-ts: setup-npm setup-python
	npm run typecheck
	npm run test:unit

# The packaged extension installed into code-server and driven by Chromium.
test-e2e: setup-e2e vsix
	npm run test:e2e

bench: setup
	$(PY) bench/run.py

# Extension activation, bundle sizes, and Trace Memory -> painted annotations, in code-server.
bench-ext: setup-e2e vsix
	npm run bench:ext

clean:
	rm -rf .memlens dist out test/e2e/artifacts python/memlens/webview_dist
