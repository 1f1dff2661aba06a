# Two commands on a fresh machine:
#   make demo   set everything up, trace the bundled example, print the report
#   make test   set everything up, run every test of the project
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test setup setup-system setup-python setup-web build test-python test-webview test-cuda-build bench bench-webview clean

setup-python:
	@scripts/setup-python.sh

setup-system:
	@scripts/setup-system.sh

setup-web:
	@scripts/setup-web.sh

setup: setup-system setup-python setup-web

# The extension and the panel bundle (dist/, and the copy the Python package ships for
# `memlens show --html`).
build: setup-web
	npm run build

demo: setup
	$(PY) -m memlens run -- examples/gpt/train.py --batch-size 8

test: setup test-python test-webview

# MEMLENS_STRICT_TESTS: what the set-up provides (Neovim, the panel bundle) must be there; tests
# that would skip without it fail instead.
test-python: setup-system setup-python build
	MEMLENS_STRICT_TESTS=1 $(PY) -m pytest python/tests -q

# The CUDA-path tests against a CUDA build of torch (no GPU needed): the fake-CUDA layer must
# work there too. Needs ~6 GB of disk for .venv-cuda.
test-cuda-build:
	@VENV=.venv-cuda TORCH=torch==2.14.1 scripts/setup-python.sh
	.venv-cuda/bin/python -m pytest -q python/tests/test_fake_cuda.py \
	  python/tests/test_cuda_analytic.py python/tests/test_cuda_scripts.py python/tests/test_oom.py

# The panel: unit tests of its data modules and browser tests of the standalone report.
test-webview: setup build
	MEMLENS_PYTHON=$(abspath $(PY)) npm run test:webview

bench: setup
	$(PY) bench/run.py

bench-webview: setup build
	MEMLENS_PYTHON=$(abspath $(PY)) node bench/webview_render.mjs

clean:
	rm -rf .memlens dist out test/e2e/artifacts
