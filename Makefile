# Two commands on a fresh machine:
#   make demo   set everything up, trace the bundled example, print the report
#   make test   set everything up, run every test of the project
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test setup setup-system setup-python test-python test-cuda-build bench clean

setup-python:
	@scripts/setup-python.sh

setup-system:
	@scripts/setup-system.sh

setup: setup-system setup-python

demo: setup
	$(PY) -m memlens run --device cpu -- examples/gpt/train.py --batch-size 8

test: setup test-python

test-python: setup-system setup-python
	$(PY) -m pytest python/tests -q

bench: setup
	$(PY) bench/run.py

clean:
	rm -rf .memlens dist out test/e2e/artifacts
