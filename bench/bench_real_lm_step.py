"""Whole training steps of the project's trainers against TRL's stock GRPOTrainer on a real LM, in the setting a
real-LM study trains in: seconds per step and the peak resident set of the training process.

The study config (``bench/real_lm_countries.yaml``: model, task, and the LoRA and batch settings of its ``common``)
gives the setting and its arms the trainers: stock GRPO (``recipes/tiny/grpo.yaml``, TRL's own ``GRPOTrainer``),
α-DPG and the KL arms at their first β. Each arm trains ``--steps`` steps through ``rlvr-div train`` in a fresh
process, ``--rounds`` times, the arms alternating (A B C A B C ...). Per arm: s/step = the median over its runs of the
median ``step_time`` after the first (warm-up) step; peak RSS = the largest maximum resident set of its processes
(``wait4``'s rusage of that child alone), model load included. Ratios are to stock GRPO from the same rounds.

    .venv/bin/python bench/bench_real_lm_step.py --config bench/real_lm_countries.yaml --steps 4 --rounds 2
    .venv/bin/python bench/bench_real_lm_step.py --smoke     # the tiny base, 2 steps, 1 round: a check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collapse_bench.beta_spec import Study, StudyRun, load_study  # noqa: E402
from collapse_bench.beta_study import train_settings  # noqa: E402
from collapse_bench.engine import code_commit  # noqa: E402
from collapse_bench.spec import recipe_argv  # noqa: E402

SMOKE_CONFIG = """model: tiny
task: pairsum
task_options: {max_target: 9}
seeds: [1]
betas: [0.1]
common: {num_generations: 4, per_device_train_batch_size: 8, max_completion_length: 8, learning_rate: 3.0e-4,
         max_steps: 2, temperature: 1.0, use_cpu: true, bf16: false}
arms:
  - {name: grpo, kind: point, recipe: ROOT/recipes/tiny/grpo.yaml}
  - {name: alpha_dpg, kind: point, recipe: ROOT/recipes/tiny/alpha_dpg.yaml}
"""


def arm_settings(study: Study, arm: Any, out: str, steps: int) -> dict[str, Any]:
    """``rlvr-div train``'s settings for one benchmark run of ``arm``: the study's own for its seed 1 (a β arm at its
    first β), ``steps`` steps, every step logged."""
    beta = (arm.betas or study.betas)[0] if arm.key is not None else None
    return {**train_settings(study, StudyRun(arm.name, beta, 1), out), "max_steps": steps, "logging_steps": 1}


def run_once(study: Study, arm: Any, steps: int, threads: int) -> dict[str, float]:
    """One fresh ``rlvr-div train`` process: its per-step times (after the first) and its peak resident set."""
    with tempfile.TemporaryDirectory() as out:
        settings = arm_settings(study, arm, out, steps)
        argv = [sys.executable, "-m", "rlvr_div", "train", *recipe_argv(arm.recipe, settings)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
        log = Path(out) / "train.log"
        with log.open("w") as f:
            child = subprocess.Popen([*argv, "--threads", str(threads)], cwd=ROOT, env=env, stdout=f, stderr=f)
            _, status, usage = os.wait4(child.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{arm.name} failed:\n{log.read_text()[-3000:]}")
        lines = [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]
        times = [x["step_time"] for x in lines if "step_time" in x]
    if len(times) < 2:
        raise RuntimeError(f"{arm.name}: {len(times)} step time(s) logged; give --steps >= 2")
    return {"s_per_step": statistics.median(times[1:]), "peak_rss_mib": usage.ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "bench" / "real_lm_countries.yaml"), help="a real-LM study")
    ap.add_argument("--arms", help="comma-separated arm names (default: every arm of the config)")
    ap.add_argument("--steps", type=int, default=4, help="training steps per run (the first is warm-up)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per arm, the arms alternating")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--smoke", action="store_true", help="the tiny base, 2 steps, 1 round (numbers mean nothing)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        if args.smoke:
            path = Path(scratch) / "smoke.yaml"
            path.write_text(SMOKE_CONFIG.replace("ROOT", str(ROOT)))
            args.config, args.steps, args.rounds = str(path), 2, 1
        study = load_study(args.config)
    names = args.arms.split(",") if args.arms else [a.name for a in study.arms]
    arms = [study.arm(n) for n in names]
    if not any(a.name == "grpo" for a in arms):
        ap.error("the arms must include 'grpo' (stock TRL GRPO, the reference of the ratios)")
    runs: dict[str, list[dict[str, float]]] = {a.name: [] for a in arms}
    for r in range(args.rounds):
        for arm in arms:
            runs[arm.name].append(run_once(study, arm, args.steps, args.threads))
            print(f"round {r + 1} {arm.name}: {runs[arm.name][-1]}", flush=True)
    table = {n: {"s_per_step": statistics.median(x["s_per_step"] for x in v),
                 "peak_rss_mib": max(x["peak_rss_mib"] for x in v), "runs": v} for n, v in runs.items()}  # fmt: skip
    stock = table["grpo"]
    print(f"\n{study.model} on {study.task}: {args.steps} steps x {args.rounds} rounds, {args.threads} threads")
    print("| arm | s/step | vs stock GRPO | peak RSS (MiB) | vs stock GRPO |\n|---|---|---|---|---|")
    for n, row in table.items():
        print(f"| {n} | {row['s_per_step']:.2f} | {row['s_per_step'] / stock['s_per_step']:.2f}x | "
              f"{row['peak_rss_mib']:.0f} | {row['peak_rss_mib'] / stock['peak_rss_mib']:.2f}x |")  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        record = {"command": " ".join(["bench/bench_real_lm_step.py", *(sys.argv[1:] if argv is None else argv)]),
                  "commit": code_commit(ROOT), "config": args.config, "steps": args.steps, "rounds": args.rounds,
                  "threads": args.threads, "arms": table}  # fmt: skip
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
