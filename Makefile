# `make demo` runs the main job and `make test` the test suite; each sets up .venv on a fresh machine first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-slow test-vllm lint bench clean

# torch first: on a machine without CUDA take the CPU wheel 2.13.0, so the project's torch range never resolves
# to a multi-GB CUDA build. On a CUDA machine the range in pyproject.toml picks the matching build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/python -m pip install -q torch==2.13.0; fi
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/rlvr-div train --config recipes/tiny/grpo.yaml

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs demo_out .pytest_cache
