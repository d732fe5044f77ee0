#!/usr/bin/env bash
# Start a vLLM server for TRL's `vllm_mode: server` on GPUs apart from the trainer's.
#
#   launch/vllm_server.sh MODEL [GPU_IDS] [PORT]
#   e.g. launch/vllm_server.sh Qwen/Qwen2.5-1.5B-Instruct 7 8000
# then, on the other GPUs:
#   CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6 accelerate launch --config_file launch/ddp.yaml --num_processes 7 \
#     -m rlvr_div.train --config RECIPE --use_vllm true --vllm_mode server --vllm_server_port 8000
#
# Flags as TRL 1.16 expects them (`trl vllm-serve` is deprecated): weights are pushed from the trainer over NCCL,
# and log-probs are the processed ones (after temperature), for TRL's importance-sampling correction.
set -euo pipefail
MODEL=${1:?usage: launch/vllm_server.sh MODEL [GPU_IDS] [PORT]}
GPUS=${2:-0}
PORT=${3:-8000}
TP=$(awk -F, '{print NF}' <<<"$GPUS")
export CUDA_VISIBLE_DEVICES=$GPUS
export VLLM_SERVER_DEV_MODE=1
exec vllm serve "$MODEL" \
  --port "$PORT" \
  --tensor-parallel-size "$TP" \
  --weight-transfer-config '{"backend":"nccl"}' \
  --logprobs-mode processed_logprobs \
  --max-logprobs -1
