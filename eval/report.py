"""``report.md`` and plots across the models of one evaluation directory.

- ``pass_at_k.png``: pass@k against k (log₂ axis) for every model, with ±1 bootstrap standard error bars;
- ``accuracy_hist.png``: the distribution of the per-problem validity rate c/n, one small panel per model;
- ``accuracy_vs_base.png`` (with two or more models): each trained model's c/n against the base's, per problem;
- ``report.md``: the reward and its settings, how each model's completions were made (sampled here, or scored from a
  sample log), each model's extractable-answer and truncation rates (with a plain line when nothing was extractable or
  many completions were cut), tables of pass@k (with a note for each model whose problems have different sample
  counts: k is cut to the smallest n), maj@k, cover@τ and diversity (value ± SE), and for every trained
  model the k at which the base overtakes it (read from the full pass@k curve, k = 1..n, on common problems).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.plots import plot_accuracy_panels, plot_accuracy_vs_base, plot_pass_at_k
from eval.records import load_records

PASS_PLOT = "pass_at_k.png"
HIST_PLOT = "accuracy_hist.png"
SCATTER_PLOT = "accuracy_vs_base.png"
REPORT = "report.md"


def _pm(value: float, se: float | None = None) -> str:
    return f"{value:.3f}" if se is None else f"{value:.3f} ± {se:.3f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def overtake_sentence(name: str, base: str, vs: Mapping[str, Any], n: int) -> str:
    """One line saying where (whether) the base's pass@k overtakes model ``name``'s by a material margin (at least
    ``eval.runner.MATERIAL_PROBLEMS`` expected problems), and saying so when neither solves anything."""
    if vs.get("both_zero"):
        return (
            f"- Neither `{base}` nor `{name}` solves any of the {vs.get('common_problems', '')} common problems "
            f"(pass@k = 0 at every k ≤ {n}): this comparison says nothing."
        )
    k = vs.get("overtake_k")
    if k is None:
        line = f"- `{base}` does not overtake `{name}` at any k ≤ {n} (by at least 0.5 expected problems)."
        if vs.get("first_ahead_k") is not None:
            line += (
                f" It is ahead from k = {vs['first_ahead_k']} by {vs['first_ahead_gap_problems']:.2g} expected "
                "problems there, which is noise."
            )
        return line
    if k == 1:
        b, m = vs["overtake_base_pass"], vs["overtake_model_pass"]
        return f"- `{base}` is ahead of `{name}` from k = 1 (pass@1 {b:.3f} vs {m:.3f})."
    return (
        f"- `{base}` overtakes `{name}` at k = {k} "
        f"(pass@{k}: {base} {vs['overtake_base_pass']:.3f} vs {name} {vs['overtake_model_pass']:.3f})."
    )


def _how_made(name: str, config: Mapping[str, Any], header_settings: Mapping[str, Any]) -> str:
    """One line per model: sampled here (with its settings) or scored from a sample log (and how it was sampled,
    when that log says; and its reward settings when they are not the header's: a GSM8K-style log's own)."""
    if "scored_from" in config:
        src = config["scored_from"]
        step = f", step {src['step']}" if "step" in src else ""
        if len(src.get("steps_in_file") or []) > 1:
            others = [x for x in src["steps_in_file"] if x != src["step"]]
            step += f" (the highest of its {len(src['steps_in_file'])} steps; also in the file: "
            step += ", ".join(map(str, others[:8])) + (", …" if len(others) > 8 else "") + ")"
        style = f", {src['style'].upper()}-style" if src.get("style") else ""
        line = f"- `{name}`: scored from {src['format']} sample log `{src['path']}` ({src['problems']} problems{step}"
        line += f"{style})"
        made = config.get("sampled_with")
        if made:
            line += "; sampled with " + ", ".join(f"{k} {v}" for k, v in made.items() if v is not None)
    else:
        line = (
            f"- `{name}` = {config['model_given']}: sampled here, n = {config['n']}, temperature "
            f"{config['temperature']}, top_p {config['top_p']}, max_new_tokens {config['max_new_tokens']}, seed "
            f"{config['seed']}, backend {config['backend']}"
        )
    own = config.get("reward_settings") or {}
    if own != header_settings:
        line += f"; scored with reward settings `{json.dumps(own, sort_keys=True)}`"
    return line + "."


def mixed_n_note(name: str, metrics: Mapping[str, Any]) -> str | None:
    """A line for a model whose problems have different sample counts (``metrics["mixed_n"]``), else None: every k
    is cut to the smallest n, and how many problems have fewer samples than the most."""
    mixed = metrics.get("mixed_n")
    if not mixed:
        return None
    return (
        f"- **Mixed n per problem** in `{name}`: the problems have {mixed['min']} to {mixed['max']} samples, so k is "
        f"cut to the smallest n = {mixed['min']} (pass@k, maj@k and the overtake k stop there); {mixed['below_max']} "
        f"of its {metrics['problems']} problems have fewer than {mixed['max']} samples ({mixed['at_min']} have only "
        f"{mixed['min']})."
    )


def _fraction(value: float | None) -> str:
    return "unknown" if value is None else f"{100 * value:.1f}%"


def answers_section(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per model: the share of completions with an extractable answer, the share truncated at the length cap, tokens
    per completion, unjudged samples; and a plain line for each model whose pass@k cannot be read as ability."""
    rows, notes = [], []
    for name, res in results.items():
        m = res["metrics"]
        extractable, truncated = m.get("extractable_fraction"), m.get("truncated_fraction")
        tokens = m.get("mean_completion_tokens")
        rows.append(
            [
                f"`{name}`",
                _fraction(extractable),
                _fraction(truncated),
                "unknown" if tokens is None else f"{tokens:.1f}",
                str(m["unjudged_samples"]),
            ]
        )
        if extractable == 0:
            notes.append(
                f"- **No answer was extractable** from any completion of `{name}`: its scores measure the answer "
                "format, not the answers. Check what the reward expects (its settings are above)."
            )
        if truncated is not None and truncated >= 0.1:
            notes.append(
                f"- {_fraction(truncated)} of `{name}`'s completions stopped at the length cap: raise "
                "--max-new-tokens before reading its pass@k."
            )
    lines = ["", "## Answers and lengths", ""]
    lines += _table(["model", "answer extracted", "truncated", "tokens/completion", "unjudged"], rows)
    return lines + ([""] + notes if notes else [])


def difficulty_section(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The execution accuracy (mean c/n = pass@1) and pass@n per difficulty (BIRD), when the task has a
    ``difficulty`` column; no lines otherwise."""
    names = [n for n in results if "by_difficulty" in results[n]["metrics"]]
    if not names:
        return []
    groups = list(dict.fromkeys(g for n in names for g in results[n]["metrics"]["by_difficulty"]))
    first = results[names[0]]["metrics"]["by_difficulty"]
    header = ["model", *[f"{g} ({first[g]['problems'] if g in first else '—'})" for g in groups], "all"]
    lines = ["", "## Execution accuracy by difficulty (mean c/n = pass@1; pass@n in brackets; problems per group)", ""]
    rows = []
    for n in names:
        m = results[n]["metrics"]
        by, top = m["by_difficulty"], str(m["n"])
        cells = [f"{by[g]['accuracy']:.3f} ({by[g]['pass_at_k'][top]:.3f})" if g in by else "—" for g in groups]
        rows.append([f"`{n}`", *cells, f"{m['pass_at_k']['1']:.3f} ({m['pass_at_k'][top]:.3f})"])
    return lines + _table(header, rows)


def write_report(output_dir: Path, results: Mapping[str, Mapping[str, Any]], base: str,
                 records: Mapping[str, list[dict[str, Any]]] | None = None) -> Path:  # fmt: skip
    """Write ``report.md`` and the plots into ``output_dir``; returns the report's path. ``records``: each model's
    per-problem records when the caller holds them (default: read from each ``samples.jsonl``)."""
    first = results[next(iter(results))]["config"]
    task = f"task `{first['task']}` ({first['split']} split)" if first.get("task") else "completions from sample logs"
    lines = [f"# pass@k evaluation: {task}", ""]
    lines += report_sections(output_dir, results, base, records=records)
    path = Path(output_dir) / REPORT
    path.write_text("\n".join(lines))
    return path


def report_sections(
    output_dir: Path,
    results: Mapping[str, Mapping[str, Any]],
    base: str,
    image_prefix: str = "",
    records: Mapping[str, list[dict[str, Any]]] | None = None,
) -> list[str]:
    """Draw the plots into ``output_dir`` and return the report's markdown lines below its title (settings,
    tables, overtake k, plots; images linked as ``image_prefix + name``). ``records``: each model's per-problem
    records when the caller holds them (default: read from each ``samples.jsonl``)."""
    output_dir = Path(output_dir)
    names = list(results)
    first = results[names[0]]["config"]
    accuracy = {}
    for name in names:
        if records is not None:
            recs = records[name]
        else:
            recs = load_records(output_dir / name, results[name]["metrics"]["problems"])
        accuracy[name] = {r["index"]: r["c"] / r["n"] for r in recs}
    plot_pass_at_k(results, output_dir / PASS_PLOT, base)
    plot_accuracy_panels(accuracy, output_dir / HIST_PLOT, base)
    if len(names) > 1:
        plot_accuracy_vs_base(accuracy, output_dir / SCATTER_PLOT, base)

    settings = json.dumps(first.get("reward_settings") or {}, sort_keys=True)
    lines = [
        f"Reward `{first['reward']}` with settings `{settings}`. Base: `{base}`. Values are means over problems "
        "± bootstrap standard error.",
        "",
        "Models:",
        "",
        *[_how_made(n, results[n]["config"], first.get("reward_settings") or {}) for n in names],
    ]
    lines += answers_section(results)
    lines += ["", "## pass@k (unbiased estimator)", ""]
    ks = sorted({int(k) for n in names for k in results[n]["metrics"]["pass_at_k"]})
    rows = []
    for n in names:
        m = results[n]["metrics"]
        rows.append(
            [f"`{n}`", str(m["problems"])]
            + [_pm(m["pass_at_k"][str(k)], m["pass_at_k_se"][str(k)]) if str(k) in m["pass_at_k"] else "" for k in ks]
        )
    lines += _table(["model", "problems", *[f"pass@{k}" for k in ks]], rows)
    notes = [note for n in names if (note := mixed_n_note(n, results[n]["metrics"]))]
    lines += [""] + notes if notes else []
    lines += difficulty_section(results)
    lines += ["", "## maj@k (majority vote over extracted answers)", ""]
    rows = []
    for n in names:
        m = results[n]["metrics"]
        rows.append(
            [f"`{n}`"]
            + [_pm(m["maj_at_k"][str(k)], m["maj_at_k_se"][str(k)]) if str(k) in m["maj_at_k"] else "" for k in ks]
        )
    lines += _table(["model", *[f"maj@{k}" for k in ks]], rows)
    taus = sorted({t for n in names for t in results[n]["metrics"]["cover_at"]}, key=float)
    lines += ["", "## cover@τ (fraction of problems with accuracy c/n ≥ τ)", ""]
    rows = [
        [f"`{n}`"] + [_pm(results[n]["metrics"]["cover_at"][t], results[n]["metrics"]["cover_at_se"][t]) for t in taus]
        for n in names
    ]
    lines += _table(["model", *[f"cover@{t}" for t in taus]], rows)
    lines += ["", "## Diversity of correct outputs (mean per problem; an unsolved problem counts 0)", ""]
    rows = []
    for n in names:
        m = results[n]["metrics"]
        d, s = m["diversity"], m["diversity_se"]
        vs = m.get("vs_base")
        lost = f"{vs['lost']}/{vs['base_solved']}" if vs else "—"
        rows.append(
            [
                f"`{n}`",
                _pm(d["solved_fraction"], s["solved_fraction"]),
                _pm(d["distinct_correct_answers"], s["distinct_correct_answers"]),
                _pm(d["distinct_correct_completions"], s["distinct_correct_completions"]),
                _pm(d["answer_entropy"], s["answer_entropy"]),
                _pm(d["correct_answer_entropy"], s["correct_answer_entropy"]),
                lost,
                "unknown" if m["mean_completion_tokens"] is None else f"{m['mean_completion_tokens']:.1f}",
            ]
        )
    lines += _table(
        [
            "model",
            "solved (c>0)",
            "distinct correct answers",
            "distinct correct completions",
            "answer entropy (nats)",
            "correct-answer entropy",
            "lost vs base",
            "tokens/completion",
        ],
        rows,
    )
    lines += ["", "## Where the base overtakes", ""]
    others = [n for n in names if n != base]
    if not others:
        lines.append("Only one model was evaluated.")
    for n in others:
        vs = results[n]["metrics"]["vs_base"]
        lines.append(overtake_sentence(n, base, vs, results[n]["metrics"]["n"]))
        if vs["base_solved"] and not vs.get("both_zero"):
            lines.append(
                f"  `{n}` no longer solves {vs['lost']} of the {vs['base_solved']} problems `{base}` solves "
                f"({100 * vs['lost_fraction']:.1f}%) and newly solves {vs['gained']}."
            )
    lines += ["", "## Plots", "", f"![pass@k]({image_prefix}{PASS_PLOT})", ""]
    lines += [f"![per-problem accuracy]({image_prefix}{HIST_PLOT})", ""]
    if len(names) > 1:
        lines += [f"![per-problem accuracy against the base]({image_prefix}{SCATTER_PLOT})", ""]
    return lines
