"""Training-step time of DivergenceGRPOTrainer for each divergence against TRL's stock GRPOTrainer (same β).

Both trainers get the same model weights and the same generated batch (with reference log-probs); one timed
"step" is the loss (policy + divergence term) and its backward pass, which is where the trainers differ. The
trainers alternate A B A B ... within one run, and the script prints the median time of each and the ratio.

    .venv/bin/python bench/bench_divergence_step.py [--repeats 40] [--batch 64]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from rlvr_div.models import load_tokenizer
from rlvr_div.models.tiny_base import tiny_model_path
from rlvr_div.rewards import get_reward
from rlvr_div.tasks import get_task

BETA = 0.04


def make_trainer(kind: str, out: str, batch: int, divergence: str | None = None):
    from trl import GRPOConfig, GRPOTrainer

    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    common = dict(
        output_dir=out, per_device_train_batch_size=batch, num_generations=8, max_completion_length=8, bf16=False,
        use_cpu=True, report_to="none", seed=0, activation_checkpointing=False,
    )  # fmt: skip
    if kind == "stock":
        cls, args = GRPOTrainer, GRPOConfig(beta=BETA, **common)
    else:
        cls, args = DivergenceGRPOTrainer, DivergenceGRPOConfig(divergence=divergence, divergence_coef=BETA, **common)
    path = str(tiny_model_path())
    return cls(
        model=path,
        reward_funcs=[get_reward("pair_sum")],
        args=args,
        train_dataset=get_task("pairsum"),
        processing_class=load_tokenizer(path),
    )


def time_step(trainer, inputs) -> float:
    t0 = time.perf_counter()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    trainer.model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--divergences", nargs="+", default=["reverse_kl", "forward_kl", "js", "alpha"])
    ap.add_argument("--smoke", action="store_true", help="batch 16, one divergence, one alternation: does it run?")
    args = ap.parse_args(argv)
    warmup = 5
    if args.smoke:
        args.batch, args.repeats, args.divergences, warmup = 16, 1, ["js"], 0
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        stock = make_trainer("stock", tmp, args.batch)
        stock.model.train()
        stock.current_gradient_accumulation_steps = 1
        rows = [r for r in stock.train_dataset.select(range(args.batch // 8)) for _ in range(8)]
        inputs = stock._generate_and_score_completions(rows)
        inputs["num_items_in_batch"] = inputs["completion_mask"].sum()
        ours = {}
        for name in args.divergences:
            t = make_trainer("ours", tmp, args.batch, name)
            t.model.load_state_dict(stock.model.state_dict())
            t.model.train()
            t.current_gradient_accumulation_steps = 1
            ours[name] = t
        for t in [stock, *ours.values()]:  # warm-up
            for _ in range(warmup):
                time_step(t, inputs)
        times: dict[str, list[float]] = {"stock": [], **{n: [] for n in ours}}
        for _ in range(args.repeats):  # A B A B ...: each divergence next to a stock step
            for name, t in ours.items():
                times["stock"].append(time_step(stock, inputs))
                times[name].append(time_step(t, inputs))
    base = statistics.median(times["stock"])
    print(f"batch {args.batch} completions, {args.repeats} alternations, median seconds per loss+backward")
    print(f"{'trainer':<22}{'median s':>10}{'ratio':>8}")
    print(f"{'stock GRPO (beta)':<22}{base:>10.5f}{1.0:>8.3f}")
    for name in ours:
        med = statistics.median(times[name])
        print(f"{'divergence=' + name:<22}{med:>10.5f}{med / base:>8.3f}")


if __name__ == "__main__":
    main()
