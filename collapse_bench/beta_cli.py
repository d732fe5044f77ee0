"""``rlvr-div beta-study --config bench/beta.yaml --out bench/results/beta``: the β study (docs/study/collapse.md,
"The β question to convergence"); resumable, ``--report-only`` rewrites the report from the finished runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collapse_bench.beta_report import write_report
from collapse_bench.beta_spec import check_arm_names, load_study
from collapse_bench.beta_study import STATE, run_study
from collapse_bench.cli import toy_reference
from collapse_bench.engine import run_and_report
from rlvr_div.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlvr-div beta-study", description=__doc__)
    p.add_argument("--config", required=True, help="the study's YAML file (bench/beta.yaml)")
    p.add_argument("--out", required=True, help="output directory (resumed when it holds finished runs)")
    p.add_argument("--fresh", action="store_true", help="delete --out first and start over")
    p.add_argument("--report-only", action="store_true", help="only rewrite the report from the finished runs")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--arms", help="train only these arms' missing runs this time (comma-separated names); the "
                   "report still covers every finished run")  # fmt: skip
    p.add_argument("--max-runs", type=int, help="train at most this many of the missing runs this time, the first "
                   "in seed-by-seed order, then report (for a time window: a run cut off is lost)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlvr-div beta-study``."""
    args = build_parser().parse_args(argv)
    study = load_study(args.config)
    arms = None if args.arms is None else tuple(a.strip() for a in args.arms.split(",") if a.strip())
    if arms is not None:
        check_arm_names(study, arms)  # before --fresh deletes anything and before the base loads
    if args.max_runs is not None and args.max_runs < 1:
        raise ConfigError(f"--max-runs must be at least 1, got {args.max_runs}")
    out = Path(args.out)
    command = "rlvr-div beta-study " + " ".join(sys.argv[2:] if argv is None else argv)
    return run_and_report(
        out, "β study", STATE, args.report_only,
        lambda: run_study(study, out, fresh=args.fresh, progress=not args.quiet, arms=arms, max_runs=args.max_runs),
        lambda: write_report(study, out, command.strip(), toy_reference(out, sorted(study.betas, reverse=True))),
    )  # fmt: skip


if __name__ == "__main__":
    from rlvr_div.cli import run_command

    sys.exit(run_command(main, sys.argv[1:]))
