"""What the collapse monitor (``rlvr_div.monitor``) adds to a training run, measured inside one run: the time of a
held-out measurement (``monitor/seconds``) against the training step's own time (TRL's ``step_time``), both logged
in the same ``metrics.jsonl``.

Each round is a fresh ``rlvr-div train --config RECIPE`` with ``--monitor_split SPLIT --monitor_steps EVERY`` (and
``--monitor_size``/``--monitor_n`` when given) for ``--steps`` steps. Per round: the median step time over the steps
after the first (warm-up), the median measurement time over the measurements after step 0 (step 0 samples the base
once per run) and their ratio per EVERY steps, added = measurement / (EVERY × step). Reported: each round and the
median over rounds.

    .venv/bin/python bench/bench_monitor_cost.py --steps 40 --every 10 --rounds 3      # tiny recipe, test split
    .venv/bin/python bench/bench_monitor_cost.py --config RECIPE --split validation --size 20 --n 8 --steps 6 \\
        --every 3 --rounds 1 -- --model_name_or_path PATH --gguf_file FILE     # any recipe; train's args after --
    .venv/bin/python bench/bench_monitor_cost.py --smoke     # 4 steps, 20 problems x 4: a check that it runs
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


def read_times(metrics: Path) -> tuple[list[float], list[tuple[int, float]]]:
    """The step times (``step_time``, in logged order) and the measurements (``(step, monitor/seconds)``) of a
    run's ``metrics.jsonl``."""
    steps: list[float] = []
    measurements: list[tuple[int, float]] = []
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        if record.get("step_time") is not None:
            steps.append(float(record["step_time"]))
        if record.get("monitor/seconds") is not None:
            measurements.append((int(record["step"]), float(record["monitor/seconds"])))
    return steps, measurements


def round_cost(steps: list[float], measurements: list[tuple[int, float]], every: int) -> dict[str, float]:
    """One run's median step (after the first), median measurement (after step 0) and added fraction
    measurement / (every × step)."""
    if len(steps) < 2 or not any(s > 0 for s, _ in measurements):
        raise SystemExit("the run logged too few steps or no measurement after step 0: raise --steps")
    step = statistics.median(steps[1:])
    measure = statistics.median(t for s, t in measurements if s > 0)
    base = next((t for s, t in measurements if s == 0), float("nan"))
    return {"step_s": step, "measurement_s": measure, "base_s": base, "added": measure / (every * step)}


def run_round(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, "-m", "rlvr_div", "train", "--config", args.config, "--output_dir", out,
                "--max_steps", str(args.steps), "--logging_steps", "1", "--save_strategy", "no",
                "--report_to", "none", "--disable_tqdm", "true",
                "--monitor_split", args.split, "--monitor_steps", str(args.every)]  # fmt: skip
        if args.size is not None:
            argv += ["--monitor_size", str(args.size)]
        if args.n is not None:
            argv += ["--monitor_n", str(args.n)]
        argv += extra
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"rlvr-div train failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
        steps, measurements = read_times(Path(out) / "metrics.jsonl")
    return round_cost(steps, measurements, args.every)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "recipes" / "tiny" / "grpo.yaml"))
    p.add_argument("--split", default="test")
    p.add_argument("--size", type=int, default=None, help="monitor_size (default: the monitor's: all)")
    p.add_argument("--n", type=int, default=None, help="monitor_n (default: the monitor's: 16)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="4 steps, a measurement every 2 on 20 problems x 4, 1 round")
    args = p.parse_args(own)
    if args.smoke:
        args.steps, args.every, args.rounds, args.size, args.n = 4, 2, 1, 20, 4
    rows = []
    for r in range(args.rounds):
        row = run_round(args, extra)
        rows.append(row)
        print(f"round {r + 1}: step {row['step_s']:.3f} s, measurement {row['measurement_s']:.3f} s "
              f"(base at step 0 {row['base_s']:.3f} s), added {100 * row['added']:.1f}% at every {args.every}",
              flush=True)  # fmt: skip
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median over {len(rows)} rounds: step {med['step_s']:.3f} s, measurement {med['measurement_s']:.3f} s, "
          f"added {100 * med['added']:.1f}% of training time at monitor_steps {args.every}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
