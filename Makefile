# Two commands for a fresh machine with Python 3.11+, pip and make:
#   make demo   set up, then train examples/mnist-cpu.yaml with 2 workers on a local control plane
#   make test   set up, then lint, type-check and run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup test lint demo bench crd clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed (found %s); set PYTHON=python3.11" % sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[worker,dev]'
	touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

demo: setup
	$(BIN)/tfjob local examples/mnist-cpu.yaml --workdir .tfjob-local/demo

crd: setup
	$(BIN)/tfjob crd > crds/tfjob.yaml

bench: setup
	$(BIN)/python bench/emulator_throughput.py
	$(BIN)/python bench/operator_scale.py
	$(BIN)/python bench/gang_replay.py
	$(BIN)/python bench/runtime_overhead.py

clean:
	rm -rf $(VENV) .tfjob-local .pytest_cache .mypy_cache .ruff_cache
