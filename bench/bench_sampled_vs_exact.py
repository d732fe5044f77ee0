"""Sampled against exact validity along a training run (issue 23, item 8): are the rollouts' logged validity and the
exact μ of the policy that drew them the same number, within sampling error?

    python bench/bench_sampled_vs_exact.py [--steps 20] [--seeds 1 2 3] [--out runs/sampled_vs_exact] [--smoke]

Stock GRPO on the collapse benchmark's `pairsum` setting (12 prompts x 8 rollouts per step, learning rate 3e-4, T = 1)
with the training prompts measured exactly (teacher forcing every valid answer) after *every* step. The rollouts of
step s are drawn from the policy after s − 1 updates, so the logged reward of step s is compared with the exact μ
measured at step s − 1 (step 0: the base). Prints the per-step pairs, the mean paired difference with its standard
error, and the exact path's first steps (the first updates of Adam move the policy by about the learning rate in every
parameter at once, and validity dips before it rises).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    from collapse_bench.sampled_vs_exact import sampled_and_exact

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--out", default="runs/sampled_vs_exact")
    p.add_argument("--smoke", action="store_true", help="2 steps, seed 1: that it runs, not a measurement")
    args = p.parse_args(argv)
    if args.smoke:  # into a temporary directory, not the checkout
        args.steps, args.seeds, args.out = 2, [1], tempfile.mkdtemp(prefix="sampled_vs_exact_")
    diffs = []
    for seed in args.seeds:
        pairs, _ = sampled_and_exact(args.steps, seed, Path(args.out) / f"seed{seed}")
        diffs += [r - m for _, r, m in pairs]
        print(f"seed {seed}: (step, sampled, exact μ of the sampling policy)")
        print("  " + ", ".join(f"({s}, {r:.3f}, {m:.3f})" for s, r, m in pairs))
        first = pairs[: min(10, len(pairs))]
        sampled, exact = statistics.fmean(r for _, r, _ in first), statistics.fmean(m for _, _, m in first)
        print(
            f"  steps 1-{len(first)}: sampled {sampled:.4f}, exact of the samplers {exact:.4f}, exact at the base "
            f"{pairs[0][2]:.4f}"
        )
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    mean = statistics.fmean(diffs)
    print(f"mean paired difference sampled − exact over {len(diffs)} steps: {mean:+.4f} ± {se:.4f} (SE)")


if __name__ == "__main__":
    main()
