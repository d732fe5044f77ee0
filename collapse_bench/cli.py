"""``rlvr-div collapse --config bench/collapse.yaml``: run (or resume) the collapse benchmark and write its report."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from collapse_bench.aggregate import aggregate
from collapse_bench.engine import run_and_report
from collapse_bench.report import write_report
from collapse_bench.runs import STATE, run_benchmark
from collapse_bench.spec import Benchmark, load_benchmark
from eval.records import write_json
from rlvr_div.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rlvr-div collapse", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="benchmark YAML (bench/collapse.yaml)")
    ap.add_argument("--out", default="runs/collapse", help="output directory (default runs/collapse)")
    ap.add_argument("--seeds", default=None, help="comma-separated training seeds (overrides the config's)")
    ap.add_argument("--workers", type=int, default=None, help="parallel runs (overrides the config's)")
    ap.add_argument("--fresh", action="store_true", help="delete --out first instead of resuming")
    ap.add_argument("--report-only", action="store_true", help="recompute the tables from the kept per-run files")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def parse_seeds(text: str, example: str) -> list[int]:
    """``--seeds`` as a list of integers (comma-separated); a one-line ConfigError showing ``example`` otherwise."""
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {text!r} must be comma-separated integers, e.g. {example}") from None


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.seeds is not None:
        out["seeds"] = parse_seeds(args.seeds, "0,1,2")
    if args.workers is not None:
        if args.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {args.workers}")
        out["workers"] = args.workers
    return out


def toy_reference(out: Path, betas: list[float]) -> dict[str, Any]:
    """The exact toy lab's reverse-KL sweep over its three policy families (cached in ``toy_reference.json``)."""
    path = out / "toy_reference.json"
    if path.is_file():
        return json.loads(path.read_text())
    from rlvr_div.toy import make_world, run_lab

    result = run_lab(make_world(), betas=betas, regularisers=("reverse_kl",), projections=())
    write_json(path, result)
    return result


def report(bench: Benchmark, out: Path, command: str) -> Path:
    """Aggregate the finished runs, write ``collapse.json`` and ``collapse.md`` (with its plots) into ``out``."""
    agg = aggregate(bench, out)
    state = json.loads((out / STATE).read_text())
    seconds = sum(state.get("invocations", []))
    failures = [f"{key}: {message}" for key, message in sorted(state.get("failures", {}).items())]
    codes = agg.pop("code_states", {})
    header = [
        "# Collapse benchmark",
        "",
        f"Command: `{command}`. Code of the runs (commit, +dirty: uncommitted changes; finished runs of the grid): "
        f"{', '.join(f'{c} ({n})' for c, n in sorted(codes.items())) or 'none yet'}. Machine: {platform.machine()}, "
        f"{os.cpu_count()} CPU cores; {bench.workers} parallel runs × {bench.threads} torch thread(s). Wall time of "
        f"the invocations so far: {seconds / 60:.1f} min. Base model: `{bench.model}`; seeds {list(bench.seeds)}.",
        "",
        "Every number is the mean ± the 95% Student-t half-width over training seeds (exact measurements: no "
        "sampling noise inside a run). pass@k, lost@k and gained@k are exact expectations for k independent draws; "
        "lost@k/gained@k count the problems the base solves and the model does not (and the reverse). cov@k is the "
        "expected p*-mass of the valid answers seen in k draws; eff. answers = exp H(π(·|valid)); KL(p*‖π_v) is in "
        "nats. Protocol: docs/study/collapse.md.",
    ]
    sweep = bench.beta_sweep
    base_mu = None
    if sweep is not None:
        base = json.loads((out / "base" / f"{sweep.task}.json").read_text())
        base_mu = base["splits"]["train"]["summary"]["per_prompt"]["mu"]
    toy = toy_reference(out, sorted({b for b in sweep.betas if b > 0}, reverse=True)) if sweep else None
    agg["failures"] = failures
    write_json(out / "collapse.json", agg)
    return write_report(agg, out, header, toy, base_mu, failures)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlvr-div collapse``."""
    args = build_parser().parse_args(argv)
    bench = load_benchmark(args.config, _overrides(args))
    out = Path(args.out)
    command = "rlvr-div collapse " + " ".join(sys.argv[2:] if argv is None else argv)
    return run_and_report(
        out, "collapse benchmark", STATE, args.report_only,
        lambda: run_benchmark(bench, out, fresh=args.fresh, progress=not args.quiet),
        lambda: report(bench, out, command.strip()),
    )  # fmt: skip


if __name__ == "__main__":
    from rlvr_div.cli import run_command

    sys.exit(run_command(main, sys.argv[1:]))
