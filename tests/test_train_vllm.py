"""Training with vLLM rollouts (``use_vllm: true, vllm_mode: colocate``) on the CPU build of vLLM (``make test-vllm``).

Each test trains a tiny recipe for a few steps through the CLI in a subprocess (vLLM spawns workers) and reads
TRL's importance-sampling metrics from ``metrics.jsonl``: ``sampling/importance_sampling_ratio/{min,mean,max}`` are
the per-token ratios exp(log π_trainer − log π_vLLM) over the completion tokens of the step's batch.

Tolerances: sampler and trainer both run the same float32 weights
(``rlvr_div.trainers.trl_seam.colocated_vllm_on_cpu`` gives the engine the policy's dtype and reloads the weights
every step), so the per-token ratios differ from 1 only by
kernel round-off: measured |ratio − 1| ≤ 2e-5 per token and ≤ 2e-6 for the mean. We allow 1e-3 per token (min and
max) and 1e-4 for the mean. The learning rate is raised to 1e-3 so that a broken sync shows: with a stale LM head
the same run measured min/max ratios of 0.73 / 1.44 from the second step. The mean alone is a weak check, since
E_vLLM[π_trainer/π_vLLM] = 1 whatever the mismatch (the stale run's means were 0.991–1.004).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[1]
STEPS = 4
TOKEN_TOL = 1e-3  # per-token ratio (min/max over the step's completion tokens)
MEAN_TOL = 1e-4  # mean ratio of a step


def _cli(*args: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "rlvr_div.cli", *args]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _train_vllm(out: Path, recipe: str, *extra: str) -> list[dict]:
    _cli(
        "train", "--config", recipe, "--output_dir", str(out), "--use_vllm", "true", "--vllm_mode", "colocate",
        "--max_steps", str(STEPS), "--per_device_train_batch_size", "64", "--learning_rate", "1e-3",
        "--save_strategy", "no", "--disable_tqdm", "true", *extra,
    )  # fmt: skip
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    assert (out / "model.safetensors").is_file()
    for r in steps:
        lo, mean, hi = (r[f"sampling/importance_sampling_ratio/{k}"] for k in ("min", "mean", "max"))
        assert abs(mean - 1) <= MEAN_TOL, r
        assert 1 - TOKEN_TOL <= lo <= mean <= hi <= 1 + TOKEN_TOL, r
        assert r["sampling/sampling_logp_difference/max"] <= TOKEN_TOL, r
    return steps


def test_divergence_grpo_trains_on_vllm_rollouts(tmp_path, tiny_path):
    steps = _train_vllm(tmp_path / "run", "recipes/tiny/forward_kl.yaml")
    assert all(r["divergence/forward_kl"] >= 0 for r in steps)


def test_dph_trains_on_vllm_rollouts(tmp_path, tiny_path):
    """The offline stage samples with vLLM (``use_vllm: true``), its reference log-probs come from the HF model,
    and training on the set runs on vLLM rollouts."""
    import datasets
    import torch

    from rlvr_div.logprobs import token_logprobs
    from rlvr_div.models import load_model

    rehearsal = tmp_path / "rehearsal"
    recipe = "recipes/tiny/dph_forward_kl.yaml"
    _cli("rehearse", "--config", recipe, "--rehearsal_path", str(rehearsal), "--task_size", "24", "--use_vllm", "true")
    summary = json.loads((rehearsal / "summary.json").read_text())
    assert summary["backend"] == "vllm" and summary["n_prompts"] == 24 and summary["n_rehearsal"] > 0
    stored = datasets.load_from_disk(str(rehearsal / "rehearsal"))
    with torch.no_grad():
        ref = token_logprobs(load_model(tiny_path).eval(), stored["prompt_ids"], stored["completion_ids"])
    for got, want in zip(stored["ref_logps"], ref):
        assert got == pytest.approx(want, abs=1e-5)
    steps = _train_vllm(tmp_path / "run", recipe, "--rehearsal_path", str(rehearsal), "--rehearsal_batch_size", "8")
    assert all(r["rehearsal/nll"] > 0 for r in steps)


def test_dpg_trains_on_vllm_rollouts(tmp_path, tiny_path):
    """α-DPG on vLLM rollouts: Ẑ is weighted by the sampler's log-probs, which TRL hands over with vLLM."""
    steps = _train_vllm(tmp_path / "run", "recipes/tiny/alpha_dpg.yaml")
    assert all(0 < r["dpg/z_mean"] <= 1 and math.isfinite(r["dpg/divergence"]) for r in steps)
