"""Sampled against exact validity along a training run: the rollouts' logged validity at step s and the exact μ of
the policy that drew them (the policy after s − 1 updates, measured by teacher forcing after step s − 1).

The collapse benchmark measures its path every 10 steps; comparing the rollouts of steps 1–10 with the path's points
at 0 and 10 misses the first updates, which lower validity before they raise it (docs/study/collapse.md,
"Sampled and exact validity"). ``bench/bench_sampled_vs_exact.py`` prints the comparison; the tests check the
agreement."""

from __future__ import annotations

import json
from pathlib import Path


def sampled_and_exact(
    steps: int, seed: int, out: Path, learning_rate: float = 3e-4
) -> tuple[list[tuple[int, float, float]], list[float]]:
    """Stock GRPO on `pairsum` (n <= 25: 12 prompts x 8 rollouts per step, T = 1) with the training prompts measured
    exactly after every step: ((step s, the rollouts' validity at step s, the exact μ of the policy that drew them,
    i.e. after s − 1 updates) for s = 1..steps, the base's exact μ per prompt)."""
    from collapse_bench.measure import exact_trajectory, logprobs_of, split_rows, summarise, valid_sets
    from collapse_bench.spec import recipe_argv, run_settings
    from rlvr_div.models import resolve_model
    from rlvr_div.train import main as train

    rows = split_rows("pairsum", "train", {"max_target": 25})
    prompts, valid = [r["prompt"] for r in rows], valid_sets("pairsum", rows)
    base = logprobs_of(resolve_model("tiny"), "pairsum", rows, 1.0)
    path: list[dict] = []
    settings = {
        "model_name_or_path": "tiny", "num_generations": 8, "per_device_train_batch_size": 96,
        "max_completion_length": 8, "temperature": 1.0, "learning_rate": learning_rate, "lr_scheduler_type": "constant",
        "max_steps": steps, "logging_steps": 1, "bf16": False, "use_cpu": True,
    } | run_settings("pairsum", {"max_target": 25}, seed, out)  # fmt: skip
    callback = exact_trajectory(prompts, valid, base, [1], 1, 1.0, path)
    recipe = str(Path(__file__).resolve().parents[1] / "recipes/tiny/grpo.yaml")
    if train(recipe_argv(recipe, settings), callbacks=[callback]):
        raise RuntimeError(f"training failed; see {out}")
    summary = summarise(prompts, valid, base, base, [1])
    mu = {0: summary["mean"]["mu"]} | {p["step"]: p["mu"] for p in path}
    logged = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rewards = {r["step"]: r["reward"] for r in logged if "reward" in r}
    return [(s, rewards[s], mu[s - 1]) for s in range(1, steps + 1)], list(summary["per_prompt"]["mu"])
