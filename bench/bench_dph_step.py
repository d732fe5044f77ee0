"""Training-step time of DPH-RL (forward-KL rehearsal term, no reference model) against stock GRPO with β > 0.

Both trainers start from the tiny base and see the same prompts; one timed step is TRL's ``training_step`` on a
generation batch: sampling, rewards, then loss and backward. Stock GRPO adds a reference forward pass (β = 0.04);
DPH instead stacks a batch of stored rehearsal samples under the policy's rows in its one loss forward/backward.
The two alternate A B A B in one run; the script prints medians and the ratio (target ≤ 1.0×) for each
(rollouts, rehearsal samples) setting given. It builds its rehearsal set first (`rlvr-div rehearse` on `pairsum`).
Defaults: the tiny recipe's 128 rollouts with 32 and 64 rehearsal samples, and 64 with 64 (a setting needs
ROLLOUTS / 8 distinct prompts, at most the 24 of the rehearsal set's D_exp; 256 rollouts would need 32).
``--smoke``: one setting, 64:16, one alternation, no warm-up: checks that the script runs (the test suite runs it).

    .venv/bin/python bench/bench_dph_step.py [--repeats 20] [--settings 128:32 128:64 64:64] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from rlvr_div.recipe import parse_recipe
from rlvr_div.rehearse import main as rehearse
from rlvr_div.train import build_trainer

RECIPES = Path(__file__).resolve().parents[1] / "recipes/tiny"
RECIPE = str(RECIPES / "dph_forward_kl.yaml")


def make(recipe: str, out: str, batch: int, *extra: str):
    script, training, model = parse_recipe(
        ["--config", recipe, "--output_dir", out, "--per_device_train_batch_size", str(batch), "--save_strategy", "no",
         "--disable_tqdm", "true", *extra]
    )  # fmt: skip
    trainer = build_trainer(script, training, model)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def time_step(trainer, rows) -> float:
    t0 = time.perf_counter()
    trainer.training_step(trainer.model, rows, None)
    trainer.model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--settings", nargs="+", default=["128:32", "128:64", "64:64"], help="ROLLOUTS:REHEARSAL")
    ap.add_argument("--smoke", action="store_true", help="one small setting, one alternation: does it run?")
    args = ap.parse_args(argv)
    warmup = 3
    if args.smoke:
        args.settings, args.repeats, warmup = ["64:16"], 1, 0
    torch.manual_seed(0)
    print(f"median seconds per training step over {args.repeats} alternations")
    print("| rollouts | rehearsal samples | stock GRPO, β = 0.04 | DPH forward_kl | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        rehearsal = f"{tmp}/rehearsal"
        rehearse(["--config", RECIPE, "--rehearsal_path", rehearsal])
        for setting in args.settings:
            batch, size = (int(x) for x in setting.split(":"))
            dph = make(RECIPE, f"{tmp}/dph", batch, "--rehearsal_path", rehearsal, "--rehearsal_batch_size", str(size))
            grpo = str(RECIPES / "grpo.yaml")
            stock = make(grpo, f"{tmp}/grpo", batch, "--beta", "0.04", "--task", "pairsum", "--learning_rate", "1e-4")
            rows = [r for r in dph.train_dataset.select(range(batch // 8)) for _ in range(8)]
            for t in (dph, stock):  # warm-up
                for _ in range(warmup):
                    time_step(t, rows)
            times: dict[str, list[float]] = {"grpo": [], "dph": []}
            for _ in range(args.repeats):
                times["grpo"].append(time_step(stock, rows))
                times["dph"].append(time_step(dph, rows))
            g, d = statistics.median(times["grpo"]), statistics.median(times["dph"])
            print(f"| {batch} | {size} | {g:.4f} | {d:.4f} | {d / g:.3f}× |", flush=True)


if __name__ == "__main__":
    main()
