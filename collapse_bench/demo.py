"""``rlvr-div demo`` (= ``make demo``): the short version of the collapse benchmark, on the built-in tiny model.

It trains the stock TRL baseline (GRPO, β = 0) and the cells of the full benchmark that show its headline on the
benchmark's base ``tiny2``, ``skewsum`` ('add n:' → any a+b = n, a skewed filtered model) and ``carry`` ('a+b=',
one answer), with the benchmark's equal budgets, then measures every model exactly: validity, pass@k, and the
distance to the filtered model p* (KL(p*‖π(·|valid)), effective number of valid answers, p*-mass covered).
``<out>/report.md`` puts what the full benchmark found (docs/study/collapse.md) above the demo's own tables. Resumable
like the benchmark: a rerun skips every finished run.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from collapse_bench.cli import parse_seeds
from rlvr_div.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "bench" / "demo.yaml"
FINDINGS = ROOT / "docs" / "study" / "collapse.md"
REPORT = "report.md"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rlvr-div demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    ap.add_argument("--config", default=str(CONFIG), help="benchmark config of the demo (default bench/demo.yaml)")
    ap.add_argument("--steps", type=int, default=None, help="training steps per run (default: the config's)")
    ap.add_argument("--seeds", default=None, help="comma-separated training seeds (default: the config's)")
    ap.add_argument("--fresh", action="store_true", help="delete --out first instead of resuming")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def check_args(args: argparse.Namespace) -> dict[str, Any]:
    """Overrides of the demo config from the arguments (one-line :class:`ConfigError`) before anything runs."""
    overrides: dict[str, Any] = {}
    if args.steps is not None:
        if args.steps < 1:
            raise ConfigError(f"--steps must be >= 1, got {args.steps}")
        path = Path(args.config)
        raw = yaml.safe_load(path.read_text()) if path.is_file() else {}
        overrides["common"] = {**(raw.get("common") or {}), "max_steps": args.steps}
    if args.seeds is not None:
        overrides["seeds"] = parse_seeds(args.seeds, "0,1")
    return overrides


def findings(path: Path = FINDINGS) -> list[str]:
    """The findings block of docs/study/collapse.md (between ``<!-- findings -->`` and ``<!-- /findings -->``)."""
    if not path.is_file():
        return []
    match = re.search(r"<!-- findings -->\n(.*?)<!-- /findings -->", path.read_text(), re.S)
    return match.group(1).strip().splitlines() if match else []


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlvr-div demo``."""
    from collapse_bench.cli import report
    from collapse_bench.runs import run_benchmark
    from collapse_bench.spec import load_benchmark
    from rlvr_div.runs.run_lock import directory_lock

    args = build_parser().parse_args(argv)
    bench = load_benchmark(args.config, check_args(args))
    out = Path(args.out)
    command = "rlvr-div demo " + " ".join(sys.argv[2:] if argv is None else argv)
    t0 = time.perf_counter()
    from rlvr_div.models.tiny_base import tiny_model_path, tiny_spec

    spec = tiny_spec(bench.model)
    if spec is not None:
        print(f"tiny base model: {tiny_model_path(spec, progress=not args.quiet)}", flush=True)
    with directory_lock(out, "collapse benchmark", "--out"):  # one writer per directory, for the runs and the report
        run_benchmark(bench, out, fresh=args.fresh, progress=not args.quiet)
        tables = report(bench, out, command.strip())
        seconds = time.perf_counter() - t0
        lines = [
            "# rlvr-div demo: the collapse and the cure, on the tiny model",
            "",
            f"Command: `{command.strip()}` ({seconds:.0f} s in this invocation). The full benchmark (every method, "
            "every coefficient, 5 seeds, two tasks) is `make bench-collapse`; its protocol and tables are in "
            "[docs/study/collapse.md](../docs/study/collapse.md).",
            "",
            "## What the full benchmark found",
            "",
        ]
        lines += findings() or ["(docs/study/collapse.md has no findings block yet)"]
        lines += ["", "## This demo's runs", ""]
        tables_lines = tables.read_text().splitlines()[1:]  # without its title, each heading a level lower
        lines += [("#" + line) if re.match(r"#+ ", line) else line for line in tables_lines]
        path = out / REPORT
        path.write_text("\n".join(lines) + "\n")
    print(f"report: {path}  ({seconds:.0f} s in this invocation)")
    return 0


if __name__ == "__main__":
    from rlvr_div.cli import run_command

    sys.exit(run_command(main, sys.argv[1:]))
