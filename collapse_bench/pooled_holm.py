"""Holm pooled over a block of robustness tests: one family for every primary comparison of several reports.

Each report (``collapse.json``) applies Holm to its own task's family (a robustness setting's two or so tests). A
robustness block asks one question over all its settings, so its claims are read with Holm over the block's m tests
pooled: adjusted p̃ (:func:`collapse_bench.stats.holm_adjusted`) and a claim held by the reports' own rule with the
block as the family: the difference is separated (its interval excludes 0), at least its report's declared
``min_difference`` in size (:func:`collapse_bench.classes.claimed`), and p̃ <= α.

Since every report's family lies inside the block, a claim the block holds (at its report's α) its own family holds
too: Holm's adjusted p of a test never falls when tests join its family (each p_(i) is multiplied by the number of
tests with a p at least as large, which can only grow). Pooling can only take claims away.

    python -m collapse_bench.pooled_holm --report bench/results/collapse_routes_robust \\
        --report bench/results/collapse_routes_base_seed1 --report bench/results/collapse_routes_base_seed2 \\
        --out bench/results/collapse_routes_robust/pooled_holm.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from collapse_bench.classes import claimed
from collapse_bench.markdown import num, table
from collapse_bench.stats import holm_adjusted

ALPHA = 0.05


def block_rows(reports: dict[str, Path]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every primary-comparison row of the reports, keyed ``(report, task, method)``, with its report's declared
    ``min_difference`` (0 where the report declares none)."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for name, path in reports.items():
        report = json.loads((path / "collapse.json").read_text())
        for task, entry in report["tasks"].items():
            primary = entry.get("primary") or {}
            smallest = float((primary.get("spec") or {}).get("min_difference", 0.0))
            for method, row in primary.get("rows", {}).items():
                rows[(name, task, method)] = {**row, "min_difference": smallest}
    return rows


def pooled(rows: dict[tuple[str, str, str], dict[str, Any]], alpha: float = ALPHA) -> dict[tuple[str, str, str], Any]:
    """Per row: its own family's verdict (``claimed``), the pooled adjusted p and the pooled verdict."""
    tested = {key: row["p"] for key, row in rows.items() if row.get("p") is not None}
    adjusted = holm_adjusted(tested)
    return {key: {"mean": row["mean"], "lo": row["lo"], "hi": row["hi"], "n": row["n"], "p": row.get("p"),
                  "own_family": bool(row.get("claimed")), "pooled_p": adjusted.get(key),
                  "pooled": claimed(row, row.get("min_difference", 0.0)) and adjusted.get(key, 1.0) <= alpha}
            for key, row in rows.items()}  # fmt: skip


def markdown(block: dict[tuple[str, str, str], Any], command: str, alpha: float = ALPHA) -> str:
    m = sum(1 for v in block.values() if v["p"] is not None)
    lines = [f"# Holm pooled over the block's {m} tests", "",
             f"Made by `{command}` from the reports' `collapse.json` (nothing is run). Each row is one primary "
             f"comparison (the method minus GRPO); its own report tests it with Holm over its task's family; here "
             f"the family is the block's {m} tests, α = {alpha}. Held: the interval excludes 0, |Δ| is at least "
             "the report's declared smallest difference and the adjusted p ≤ α.", ""]  # fmt: skip
    rows = [[report, task, method, f"{num(v['mean'], 1)} [{num(v['lo'], 1)}, {num(v['hi'], 1)}]", str(v["n"]),
             num(v["p"]), "yes" if v["own_family"] else "no", num(v["pooled_p"]), "yes" if v["pooled"] else "no"]
            for (report, task, method), v in sorted(block.items())]  # fmt: skip
    header = ["report", "task", "method", "Δ (95% t)", "seeds", "p", "held (own family)", "pooled adjusted p",
              "held (pooled)"]  # fmt: skip
    return "\n".join(lines + table(header, rows)) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m collapse_bench.pooled_holm", description=__doc__.split("\n\n")[0])
    p.add_argument("--report", action="append", required=True, help="a report directory (its collapse.json)")
    p.add_argument("--out", required=True, help="the markdown table to write")
    p.add_argument("--alpha", type=float, default=ALPHA)
    args = p.parse_args(argv)
    reports = {Path(r).name: Path(r) for r in args.report}
    missing = [str(path / "collapse.json") for path in reports.values() if not (path / "collapse.json").is_file()]
    if missing:
        print(f"error: no report at {', '.join(missing)}", file=sys.stderr)
        return 2
    command = "python -m collapse_bench.pooled_holm " + " ".join(f"--report {r}" for r in args.report)
    block = pooled(block_rows(reports), args.alpha)
    Path(args.out).write_text(markdown(block, f"{command} --out {args.out}", args.alpha))
    held = sum(v["pooled"] for v in block.values())
    print(f"{args.out}: {held} of {len(block)} comparisons held with Holm pooled over the block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
