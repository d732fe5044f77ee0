"""The SQL pilot's summary (issue 62, item 5; sampled by ``bench/sql_pilot.sh``): for each model × dataset cell of
``rlvr-div eval`` output, base pass@1/8/64, the problems solved in 64 samples with a one-sided 95% Clopper–Pearson
upper bound, how many completions' queries start with SELECT, how many execute (within the reward's deadline and
row limit) and how many fail on a table or column the database lacks, and the gate: the study trains on a dataset
only where the base's pass@64 is at least 0.2.

Every figure is recomputed from the cell's ``base/samples.jsonl``. The task's rows are built again from the cell's
``config.json`` (task, split, seed, options), and each record's prompt must equal its row's; the database paths come
from the rows, so the summary reproduces on a machine with the shared data elsewhere. Two checks that the verifier
can say yes: each problem's gold query, written as a completion in the prompt's format (``" " + gold + "\\n"``),
scores 1, and the recorded completions score again as recorded.

    python -m collapse_bench.sql_pilot --out bench/results/sql_pilot      (writes summary.json and summary.md there)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from collapse_bench.stats import clopper_pearson_upper

GATE_K = 64
GATE_PASS = 0.2  # issue 62: "where pass@64 >= 0.2, run stock GRPO against α-DPG and DPH-RL"
KS = (1, 8, 64)
SAMPLES = Path("base") / "samples.jsonl"
RESULTS = Path("base") / "results.json"  # eval writes it after the last problem


def _mean_pass(records: list[dict[str, Any]], k: int) -> float:
    from rlvr_div.passk import pass_at_k

    values = pass_at_k([r["n"] for r in records], [r["c"] for r in records], [k])
    return float(values.mean())


def _names_missing(error: str) -> bool:
    """SQLite's error for a table or column that the database does not have."""
    return "no such table" in error or "no such column" in error


def summarize_cell(cell: Path) -> dict[str, Any]:
    """One cell's figures (see the module docstring); raises ValueError when a record's prompt is not its row's."""
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task

    config = json.loads((cell / "base" / "config.json").read_text())
    timing = json.loads((cell / RESULTS).read_text())["timing"]  # of the last invocation (a resumed cell: its part)
    records = [json.loads(line) for line in (cell / SAMPLES).read_text().splitlines() if line.strip()]
    rows = get_task(config["task"], split=config["split"], seed=config["task_seed"], **config["task_options"])
    reward = get_reward(config["reward"], **config["reward_settings"])
    gold_ok, rescored_ok, queries = [], [], []
    try:
        for rec in records:
            row = rows[rec["index"]]
            if rec["prompt"] != row["prompt"]:
                raise ValueError(f"{cell}: record {rec['index']}'s prompt is not the task row's")
            db, gold = row["db_path"], row["gold_sql"]
            gold_ok.append(reward.score([f" {gold}\n"], [db], [gold]) == [1.0])
            rescored_ok.append(reward.score(rec["completions"], [db] * rec["n"], [gold] * rec["n"]) == rec["scores"])
            queries += [(db, reward.extract(completion)) for completion in rec["completions"]]
        runs = list(dict.fromkeys(q for q in queries if q[1] is not None))
        outcome = dict(zip(runs, reward.pool.run(runs)))
    finally:
        reward.close()
    executable = sum(q in outcome and outcome[q][0] == "ok" for q in queries)
    unknown_name = sum(q in outcome and outcome[q][0] != "ok" and _names_missing(str(outcome[q][1])) for q in queries)
    select_first = sum(q[1] is not None and q[1].lstrip().lower().startswith("select") for q in queries)
    solved = sum(r["c"] > 0 for r in records)
    n = {r["n"] for r in records}
    pass_k = {str(k): _mean_pass(records, k) for k in KS}
    return {
        "model": cell.name.split("_", 1)[0],
        "dataset": config["task"],
        "task_options": config["task_options"],
        "problems": len(records),
        "n": sorted(n),
        "temperature": config["temperature"],
        "top_p": config["top_p"],
        "max_new_tokens": config["max_new_tokens"],
        "pass_at_k": pass_k,
        "solved": solved,
        "solved_upper95": clopper_pearson_upper(solved, len(records)),
        "correct_samples": sum(r["c"] for r in records),
        "samples": len(queries),
        "starts_with_select": select_first,
        "executable": executable,
        "unknown_table_or_column": unknown_name,
        "cut_at_cap": sum(f == "length" for r in records for f in r["finish_reasons"]),
        "gold_scores_one": all(gold_ok),
        "rescored_as_recorded": all(rescored_ok),
        "passes_gate": pass_k[str(GATE_K)] >= GATE_PASS,
        "timing": {k: timing[k] for k in ("problems_sampled", "sampling_seconds", "tokens_per_second")},
    }


def summarize(out: Path) -> dict[str, Any]:
    """Every finished cell under ``out`` (a directory whose ``base/results.json`` eval wrote after its last problem),
    by name; the cells still sampling are listed under ``unfinished``."""
    started = sorted(p.parent.parent for p in out.glob(f"*/{SAMPLES}"))
    finished = [c for c in started if (c / RESULTS).is_file()]
    if not finished:
        raise FileNotFoundError(f"no finished cell under {out} (expected {out}/<model>_<dataset>/{RESULTS})")
    return {
        "gate": {"k": GATE_K, "pass_at_k": GATE_PASS},
        "cells": {c.name: summarize_cell(c) for c in finished},
        "unfinished": [c.name for c in started if c not in finished],
    }


def render(summary: dict[str, Any]) -> str:
    """The summary as a markdown table."""
    lines = [
        "# SQL pilot (issue 62, item 5): base models, two-shot `fewshot` format",
        "",
        "Made by `python -m collapse_bench.sql_pilot --out bench/results/sql_pilot` from the cells sampled by "
        "`bash bench/sql_pilot.sh`. Gate: train on a dataset only where pass@64 ≥ 0.2.",
        "",
        "| cell | T, top-p | problems × n | pass@1 | pass@8 | pass@64 | solved (one-sided 95% upper bound) | "
        "correct samples | "
        "queries that start with SELECT | queries that execute | queries naming a table or column the database lacks | "
        "cut at the cap | gate |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c in summary["cells"].items():
        p = c["pass_at_k"]
        lines.append(
            f"| `{name}` | {c['temperature']:g}, {c['top_p']:g} | {c['problems']} × {'/'.join(map(str, c['n']))} | "
            f"{p['1']:.4f} | {p['8']:.3f} | "
            f"{p['64']:.3f} | {c['solved']}/{c['problems']} (≤ {c['solved_upper95']:.2f}) | "
            f"{c['correct_samples']} of {c['samples']} | {100 * c['starts_with_select'] / c['samples']:.1f}% | "
            f"{100 * c['executable'] / c['samples']:.1f}% | {100 * c['unknown_table_or_column'] / c['samples']:.1f}% | "
            f"{c['cut_at_cap']} | "
            f"{'met' if c['passes_gate'] else 'not met'} |"
        )
    if summary["unfinished"]:
        lines += ["", f"Still sampling, not summarised: {', '.join(f'`{c}`' for c in summary['unfinished'])}."]
    checks = all(c["gold_scores_one"] and c["rescored_as_recorded"] for c in summary["cells"].values())
    lines += [
        "",
        "Verifier checks: every problem's gold query, as a one-line completion, scores 1, and every recorded completion"
        f" scores again as recorded: {'yes' if checks else 'NO'}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collapse_bench.sql_pilot", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/sql_pilot"), help="the pilot's directory")
    args = parser.parse_args(argv)
    try:
        summary = summarize(args.out)
    except FileNotFoundError as e:
        parser.error(str(e))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "summary.md").write_text(render(summary))
    print(render(summary), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
