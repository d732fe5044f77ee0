#!/usr/bin/env bash
# GPU readiness check on a lent single-GPU machine (H100 or H200), in under 8 minutes: installs the carried wheels
# (TRL, datasets, math-verify and what they need that the machine lacks; bench/gpu_wheels.sh downloads them here),
# then runs bench/gpu_check.py: (a) step time of stock TRL GRPO against each of the project's trainers on a random
# model of Qwen2.5-0.5B's shape, side by side, with ratios; (b) sampling tokens/s (model.generate; vLLM if importable).
#
#   here:   bash bench/gpu_wheels.sh
#   there:  run(command="bash bench/gpu_check.sh", carry=[".whl/gpu_check"], timeout_s=540)
#           (extra arguments go to gpu_check.py; results also in $OUT/gpu_check.json)
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${GPU_WHEELS:-.whl/gpu_check}
PY=${PYTHON:-python3}  # on the lent machines, the python3 that holds PyTorch
SITE=${GPU_SITE:-/tmp/gpu_check_site}
LIMIT_S=${GPU_CHECK_TIMEOUT:-440}  # gpu_check.py's own limit; install and start-up come on top
start=$(date +%s)

if compgen -G "$WHEELS/*.whl" >/dev/null; then
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$WHEELS"/*.whl; then
    echo "gpu_check: installing the wheels in $WHEELS failed (two versions of one package? rerun bench/gpu_wheels.sh)"
    exit 3
  fi
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  echo "gpu_check: installed $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS in $(($(date +%s) - start)) s"
else
  echo "gpu_check: no wheels in $WHEELS (run bench/gpu_wheels.sh here and carry $WHEELS); using what is installed"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 timeout "$LIMIT_S" "$PY" bench/gpu_check.py "$@"
rc=$?
[ $rc -eq 124 ] && echo "gpu_check: stopped at its ${LIMIT_S} s limit (lower --max-completion-length or --rounds)"
echo "gpu_check: exit $rc, $(($(date +%s) - start)) s in all"
exit $rc
