"""Exact measurement of a real-LM study's prompts with each prompt's forward shared by its valid answers
(``measure_shared_prefix``, :func:`rlvr_div.logprobs.prefix_shared_logprobs`) against every (prompt, answer) row on
its own (:func:`rlvr_div.logprobs.token_logprobs`): seconds, the tokens each side runs through the model, and how far
the log-probs differ.

The study config gives the model, the task and the measured training prompts; the base model measures the first
``--prompts`` of them with both methods, alternating for ``--rounds`` rounds after a warm-up call, in one process.
Prints the median seconds of each side and their ratio, and the largest |Δ log π(y|x)| of shared against per-row,
beside the largest |Δ| of the per-row method against the study's committed ``base.json`` (measured on all prompts in
other batches: the round-off the per-row method already has from its batch composition).

    .venv/bin/python bench/bench_exact_measure.py --config bench/real_lm_between.yaml \
        --base bench/results/real_lm/between/base.json [--prompts 32] [--rounds 2] [--threads 2] [--json FILE]
    .venv/bin/python bench/bench_exact_measure.py --smoke      # the tiny base, 3 prompts, 1 round: a check that it runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collapse_bench.beta_spec import load_study  # noqa: E402
from collapse_bench.beta_study import study_rows  # noqa: E402
from collapse_bench.engine import code_commit  # noqa: E402
from collapse_bench.measure import model_checkpoint, valid_sets  # noqa: E402
from rlvr_div.exact import canonical_ids, sequence_logprobs  # noqa: E402
from rlvr_div.models import load_model, load_tokenizer  # noqa: E402
from rlvr_div.sampling import encode_prompt  # noqa: E402
from rlvr_div.tasks import get_task_spec  # noqa: E402

SMOKE_CONFIG = """model: tiny
task: pairsum
task_options: {max_target: 9}
seeds: [1]
betas: [0.1]
common: {max_steps: 2}
arms:
  - {name: grpo, kind: point, recipe: ROOT/recipes/tiny/grpo.yaml}
"""


def tokens(tokenizer, prompts: list, valid: list[list[str]], eos: bool) -> tuple[int, int]:  # noqa: ANN001
    """Tokens through the model: per row (every row's prompt and answer) and shared (each prompt once, then each
    answer after the prompt's last token)."""
    per_row = shared = 0
    for prompt, ys in zip(prompts, valid, strict=True):
        p = len(encode_prompt(tokenizer, prompt))
        answers = [len(canonical_ids(tokenizer, y, eos)) for y in ys]
        per_row += sum(p + a for a in answers)
        shared += p - 1 + sum(1 + a for a in answers)
    return per_row, shared


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "bench" / "real_lm_between.yaml"), help="a real-LM study")
    ap.add_argument("--base", help="the study's base.json (for the per-row method's own round-off; optional)")
    ap.add_argument("--prompts", type=int, default=32, help="the first n measured training prompts")
    ap.add_argument("--rounds", type=int, default=2, help="timed calls per side, the sides alternating")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--smoke", action="store_true", help="the tiny base, 3 prompts, 1 round (numbers mean nothing)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        if args.smoke:
            path = Path(scratch) / "smoke.yaml"
            path.write_text(SMOKE_CONFIG.replace("ROOT", str(ROOT)))
            args.config, args.prompts, args.rounds = str(path), 3, 1
        study = load_study(args.config)
    torch.set_num_threads(args.threads)
    rows = study_rows(study, "train")[: args.prompts]
    prompts, valid = [r["prompt"] for r in rows], valid_sets(study.task, rows)
    checkpoint = model_checkpoint(study.model, study.gguf_file)
    model, tokenizer = load_model(checkpoint).eval(), load_tokenizer(checkpoint)
    eos = get_task_spec(study.task).ends_with_eos
    temperature = float(study.common.get("temperature", 1.0))

    def measure(shared: bool) -> tuple[list[np.ndarray], float]:
        t0 = time.perf_counter()
        out = sequence_logprobs(model, tokenizer, prompts, valid, temperature, study.measure_batch_size, eos, shared)
        return out, time.perf_counter() - t0

    for shared in (False, True):  # warm-up
        sequence_logprobs(model, tokenizer, prompts[:1], valid[:1], temperature, study.measure_batch_size, eos, shared)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    results: dict[bool, list[np.ndarray]] = {}
    for r in range(args.rounds):
        for shared in (False, True):
            results[shared], s = measure(shared)
            seconds[shared].append(s)
            print(f"round {r + 1} {'shared' if shared else 'per row'}: {s:.2f} s", flush=True)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(results[True], results[False], strict=True))
    own = None
    if args.base:
        committed = json.loads(Path(args.base).read_text())["splits"]["train"]["logps"][: args.prompts]
        own = max(float(np.max(np.abs(a - np.asarray(b)))) for a, b in zip(results[False], committed, strict=True))
    per_row, shared_tokens = tokens(tokenizer, prompts, valid, eos)
    plain_s, shared_s = statistics.median(seconds[False]), statistics.median(seconds[True])
    print(f"\n{study.model} on {study.task}: {len(prompts)} prompts, {sum(map(len, valid))} answers, "
          f"{args.rounds} rounds, {args.threads} threads")  # fmt: skip
    print("| method | tokens | s (median) | vs per row |\n|---|---|---|---|")
    print(f"| per row | {per_row} | {plain_s:.2f} | 1.00x |")
    print(f"| shared prefix | {shared_tokens} | {shared_s:.2f} | {shared_s / plain_s:.2f}x |")
    beside = f"; max |per row - base.json| = {own:.2e}" if own is not None else ""
    print(f"max |shared - per row| = {diff:.2e} nats{beside}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        record = {"command": " ".join(["bench/bench_exact_measure.py", *(sys.argv[1:] if argv is None else argv)]),
                  "commit": code_commit(ROOT), "config": args.config, "prompts": len(prompts),
                  "answers": sum(map(len, valid)), "rounds": args.rounds, "threads": args.threads,
                  "tokens": {"per_row": per_row, "shared": shared_tokens}, "seconds": {"per_row": seconds[False],
                  "shared": seconds[True]}, "max_abs_diff": diff, "per_row_vs_base": own}  # fmt: skip
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
