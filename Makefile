# Two commands on a fresh machine:
#   make demo   set everything up, trace the bundled example, print the report
#   make test   set everything up, run every test of the project
# and one to build the VS Code extension:
#   make vsix   out/torch-memory-lens.vsix (install it with "Extensions: Install from VSIX...")
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# Python's bytecode cache stays on for what make runs: where the environment turns it off
# (PYTHONDONTWRITEBYTECODE, common in containers), each process a test or a trace starts
# compiled again what it imports of memlens (all of it: 0.68 s, against 0.47 s from the cache).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test setup setup-system setup-python setup-node setup-web setup-node24 \
	setup-code-server setup-e2e build vsix test-python test-ts test-webview test-e2e \
	test-cuda-build test-compat bench bench-startup bench-warm bench-test-suite bench-ranks bench-megatron bench-webview bench-ext clean

# -- set-up (each step is idempotent: quick when already done) -------------------------------
setup-python:
	@scripts/setup-python.sh

setup-system:
	@scripts/setup-system.sh

setup-node:
	@scripts/setup-node.sh

# npm dependencies (npm ci once per package-lock.json) and Debian's Chromium
setup-web: setup-node
	@scripts/setup-web.sh

# code-server (a real VS Code) on Node 24: the e2e tests' VS Code
setup-node24: setup-node
	@scripts/setup-node24.sh >/dev/null

setup-code-server: setup-node24
	@scripts/setup-code-server.sh

setup-e2e: setup-python setup-web setup-code-server

setup: setup-system setup-python setup-web

# -- build -------------------------------------------------------------------------------------
# The extension and the panel bundle (dist/, and the copy the Python package ships for
# `memlens show --html`).
build: setup-web
	npm run build

vsix: setup-web
	npm run package

# -- tests -------------------------------------------------------------------------------------
demo: setup
	$(PY) -m memlens run -- examples/gpt/train.py --batch-size 8

# Each stage's wall time is printed (scripts/test-stages.sh): CI stops at 90 minutes.
test:
	@scripts/test-stages.sh setup test-python test-ts test-webview test-e2e

# MEMLENS_STRICT_TESTS: what the set-up provides (Neovim, the panel bundle) must be there; tests
# that would skip without it fail instead. PYTEST_WORKERS processes (pytest-xdist) share the
# tests a file at a time, so a module's shared trace (a module-scoped fixture) still runs once.
PYTEST_WORKERS ?= 2
test-python: setup-system setup-python build
	MEMLENS_STRICT_TESTS=1 $(PY) -m pytest python/tests -q -n $(PYTEST_WORKERS) --dist loadfile

# The CUDA-path tests against a CUDA build of torch (no GPU needed): the fake-CUDA layer must
# work there too. Needs ~6 GB of disk for .venv-cuda.
test-cuda-build:
	@VENV=.venv-cuda TORCH=torch==2.14.1 scripts/setup-python.sh
	.venv-cuda/bin/python -m pytest -q python/tests/cuda/test_fake_cuda.py \
	  python/tests/cuda/test_cuda_analytic.py python/tests/cuda/test_cuda_scripts.py \
	  python/tests/snapshot/test_oom.py python/tests/engine/test_python_api.py \
	  "python/tests/plugins/test_hf_trainer.py::test_accelerate_loop"

# The compatibility matrix (not part of make test; run before a release, ~1 h and ~20 GB): one
# environment per row under .compat/ (the pinned versions on Python 3.11, the newest releases on
# 3.12 and 3.13), the smoke tests of scripts/compat/smoke.toml in each, and TESTED_VERSIONS
# (python/memlens/patches/tested_versions.py) written from what passed. COMPAT_ARGS="--rows
# pinned-py3.11 --upgrade" runs one row; the others keep their record.
test-compat: setup-python
	$(PY) scripts/compat/matrix.py $(COMPAT_ARGS)

# Type checks and the unit tests of the TypeScript side (plain Node; the protocol mirror and
# the device list are compared with the Python side through .venv).
test-ts: setup-web setup-python
	npm run typecheck
	MEMLENS_PYTHON=$(abspath $(PY)) npm run test:unit

# The panel: browser tests of the standalone report (its data modules are in test-ts).
test-webview: setup build
	MEMLENS_PYTHON=$(abspath $(PY)) npm run test:webview

# The packaged extension installed into a clean code-server and driven by Chromium.
test-e2e: setup-e2e vsix
	npm run test:e2e

# The engine's and the language server's benchmarks (minutes); bench/README.md says what each
# measures and records the results.
bench: setup
	$(PY) bench/engine_overhead.py --shape all --device h100-80gb
	$(PY) bench/lsp_latency.py
	$(PY) bench/host_rss_7b.py
	$(PY) bench/dataloader_trace.py --repeat 2

# `memlens run`'s start-up against `import torch`, as a ratio (a minute)
bench-startup: setup
	$(PY) bench/startup.py --repeat 5

# Trace Memory -> first annotation with the warm worker and without it, as a ratio (minutes)
bench-warm: setup
	$(PY) bench/warm_worker.py --rounds 3

# `make test`'s stages and its 20 slowest Python tests, recorded into bench/README.md
bench-test-suite: setup
	$(PY) bench/test_suite_time.py

# --ranks all against one rank at a time on an 8-rank FSDP2 job (several minutes)
bench-ranks: setup
	$(PY) bench/ranks_parallel.py

# One rank of a Llama-2-70B-shaped megatron.core job: wall time and host memory
bench-megatron: setup
	$(PY) bench/megatron_llama70b.py

bench-webview: setup build
	MEMLENS_PYTHON=$(abspath $(PY)) node bench/webview_render.mjs

# Extension activation, bundle sizes, and Trace Memory -> painted annotations, in code-server.
bench-ext: setup-e2e vsix
	npm run bench:ext

clean:
	rm -rf .memlens dist out test/e2e/artifacts python/memlens/webview_dist
