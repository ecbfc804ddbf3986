# Two entry points (see README): `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
# setuptools' editable builds warn about data folders and "editable installation" on every install:
# noise for a first-time user of `make demo`, not something they can act on
PIP = PYTHONWARNINGS=ignore $(BIN)/python -m pip
DEMO_TRACE ?= tests/data/dataloader_starved.sqlite.xz

.PHONY: demo test lint docs bench fuzz clean

# the set-up steps say one line each instead of echoing their commands (make's own echo is noise before
# the demo's output; pip still prints its errors)
$(BIN)/python:
	@echo "creating $(VENV) (first run only)"
	@$(PY) -m venv $(VENV)
	@$(PIP) install -q --upgrade pip

$(VENV)/.core: setup.cfg pyproject.toml | $(BIN)/python
	@echo "installing the analyzer into $(VENV) (editable: your checkout's code)"
	@$(PIP) install -q -e .
	@touch $@

# torch==2.13.0 first: a local CPU build; letting the `workloads` extra pick torch would download CUDA.
$(VENV)/.dev: setup.cfg pyproject.toml | $(BIN)/python
	@echo "installing the analyzer and its test dependencies into $(VENV) (torch CPU, pytest, ...)"
	@$(PIP) install -q torch==2.13.0
	@$(PIP) install -q -e '.[dev,workloads,ncu,hta]'
	@touch $@

# writes reports/<trace>.html, an ignored path (the committed reports/demo.* come from `make docs`)
demo: $(VENV)/.core
	@$(BIN)/analyze $(DEMO_TRACE)

test: $(VENV)/.dev
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy analyzer
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

lint: $(VENV)/.dev
	$(BIN)/ruff check analyzer workloads benchmarks
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy analyzer

# every generated document: docs/rules.md, reports/demo.{md,html,png}, the README's example output
# (tests/generated_docs.py; tests/test_generated_docs.py fails when one drifts from the code)
docs: $(VENV)/.core
	$(BIN)/python tests/generated_docs.py --write

# Long fuzz runs (docs/robustness.md): FUZZ_CASES per harness over FUZZ_JOBS processes (seeds FUZZ_SEED..),
# results in fuzz-results/ (one JSON per harness and seed; the last line sums every run kept there)
FUZZ_CASES ?= 10000
FUZZ_SEED ?= 1
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
fuzz: $(VENV)/.dev
	$(BIN)/python -m analyzer.fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) --jobs $(FUZZ_JOBS) --out fuzz-results

bench: $(VENV)/.core
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# The transformer grid's result tables (docs/sweep-h100/): SWEEP_DIR holds the grid's traces and their
# .pytime.json sidecars (SECTIONS=sweep bash workloads/device_round2.sh on an H100, unpacked).
SWEEP_DIR ?=
SWEEP_OUT ?= docs/sweep-h100
sweep-tables: $(VENV)/.core
	@test -n "$(SWEEP_DIR)" && test -d "$(SWEEP_DIR)" || { echo "usage: make sweep-tables SWEEP_DIR=<folder of the grid's traces and .pytime.json>" >&2; exit 2; }
	cd "$(SWEEP_DIR)" && "$(CURDIR)/$(BIN)/analyze" sweep . --format all --output "$(CURDIR)/$(SWEEP_OUT)"
