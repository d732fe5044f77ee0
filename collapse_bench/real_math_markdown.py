"""The real-math report's markdown (:mod:`collapse_bench.real_math_report`): its tables and the sentences that say how
each number was computed, from :func:`collapse_bench.real_math_report.aggregate`'s numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collapse_bench.markdown import diff_cell, num, pm, table
from collapse_bench.real_math_spec import Study


def _interval(ci: dict[str, Any] | None, digits: int = 2) -> str:
    """'mean [lo, hi]' of an interval that may be asymmetric (clipped); the mean alone without one."""
    if not ci or ci.get("mean") is None:
        return "—"
    if ci.get("lo") is None:
        return f"{ci['mean']:.{digits}f}"
    return f"{ci['mean']:.{digits}f} [{ci['lo']:.{digits}f}, {ci['hi']:.{digits}f}]"


def _header(agg: dict[str, Any], study: Study, command: str, config: str, out: str) -> list[str]:
    e, b = study.eval, agg["base"]
    model = study.model.removeprefix("package:") + (f" ({study.gguf_file})" if study.gguf_file else "")
    state = agg.get("state") or {}
    machine = (state.get("config") or {}).get("machine") or {}
    lines = [
        f"# Real math RLVR: {model} on `{study.task}`",
        "",
        f"Made by `{command}` from `base.json` and the runs' `result.json` written by `python -m "
        f"collapse_bench.real_math run --config {config} --out {out}` (nothing is sampled here). Every number is a "
        "mean ± 95% Student-t interval over seeds unless said otherwise (per seed: a mean, or a count, over the "
        "problems); pass@k is the unbiased per-problem estimator.",
        "",
        f"Held-out: the first {b['problems']} problems of split `{e.split}`, n = {b['n']} samples per problem at "
        f"T = {e.temperature:g}, top-p {e.top_p:g}, at most {e.max_new_tokens} new tokens, for the base and every end "
        f"point; along training, a checkpoint every {e.path_every} steps with n = {e.n_path} on the first "
        f"{b['path_problems']} of them (step 0 is the base, the last step the end point on those problems).",
    ]
    f = agg.get("filter")
    if f:
        lines += ["", f"Training pool: the {f['kept_count']} of the first {f['problems']} `{study.train_split}` "
                  f"problems the base solves at least once in n = {f['n']} samples (base pass@1 there "
                  f"{f['base_pass_at_1']:.3f}), the same for every arm; the test set is not filtered."]  # fmt: skip
    if state:
        invocations = state.get("invocations", [])
        lines += ["", f"Code: {', '.join(state.get('commits', []))}; machine: {machine.get('processor', '?')}, "
                  f"{machine.get('cores', '?')} cores, threads {study.threads or 'torch default'}; driver wall time "
                  f"over {len(invocations)} invocations {sum(invocations):.0f} s."]  # fmt: skip
    if agg["missing"]:
        lines += ["", f"Not finished yet: {', '.join(agg['missing'])}."]
    return lines


def _end_lines(agg: dict[str, Any]) -> list[str]:
    ks, b = agg["ks"], agg["base"]
    rows = [["base", "–", "0", *(num(b["pass_at_k"][str(k)]) for k in ks)]]
    for name, e in agg["arms"].items():
        rows.append([name, str(len(e["seeds"])), pm(e["steps"], 0), *(pm(e["end"]["pass_at_k"][str(k)]) for k in ks)])
    lines = ["## Held-out pass@k at the end", "", *table(["arm", "seeds", "steps", *(f"pass@{k}" for k in ks)], rows)]
    lines += ["", "## Problems lost and gained against the base (end)", "",
              f"Expected counts over the {b['problems']} held-out problems: lost@k = Σ_x pass_base@k(x)·(1 − "
              "pass_run@k(x)), gained@k = Σ_x (1 − pass_base@k(x))·pass_run@k(x) (per-problem unbiased estimates, "
              "the two models' draws independent; collapse_bench.real_lm_report's definition). Interval: the wider "
              "of a percentile bootstrap over seeds then problems and the t-interval over the seeds' counts, clipped "
              "at 0.", ""]  # fmt: skip
    for key, title in (("lost_at", "lost"), ("gained_at", "gained")):
        rows = [[name, *(_interval(e["end"][key][str(k)]) for k in ks)] for name, e in agg["arms"].items()]
        lines += [f"Problems {title}:", "", *table(["arm", *(f"k = {k}" for k in ks)], rows), ""]
    return lines


def _path_lines(agg: dict[str, Any]) -> list[str]:
    kmax = max(agg["path_ks"])
    rows = [[name, str(p["step"]), str(p["seeds"]), pm(p["pass_at_1"]), pm(p["pass_at_kmax"])]
            for name, e in agg["arms"].items() for p in e["path"]]  # fmt: skip
    return ["## Held-out path", "", *table(["arm", "step", "seeds", "pass@1", f"pass@{kmax}"], rows), ""]


def _primary_lines(entry: dict[str, Any], study: Study) -> list[str]:
    p = study.primary
    assert p is not None
    what = "lost" if entry["metric"] == "lost_at_k" else "gained"
    lines = [
        "## The primary comparison (declared in the config before the runs)",
        "",
        f"Each arm minus {p.against} in the expected held-out problems {what} against the base at k = {p.k}, read off "
        f"both held-out paths of a seed where pass@1 equals {', '.join(f'{v:g}' for v in p.levels)} (linear between "
        "path points, the first crossing; a seed counts at a level only if both its paths reach it), paired by seed. "
        "Interval d̄ ± t(n−1)·√(sd²/n + v_p), v_p the variance of d̄ over "
        f"{p.resamples} bootstrap draws of the path problems (collapse_bench.per_prompt.matched_with_prompts); p from "
        f"that t; Holm over the {len(entry['comparisons'])} (arm, level) comparisons at α = {p.alpha:g}, one no seed "
        "pair reaches staying in the family as not rejected. Beside it: the same t with Welch–Satterthwaite df (the "
        "problems' part with problems − 1 df; not what Holm reads) and the exact sign-flip p over the seeds' "
        "differences (its smallest possible value in brackets). "
        f"Supported: the difference is {p.direction}, its interval excludes 0 and it survives Holm.",
        "",
    ]
    rows = []
    for c in entry["comparisons"]:
        reach = ", ".join(map(str, c["seeds"])) or "none"
        miss = ", ".join(map(str, c["unreached_seeds"])) or "–"
        per_seed = ", ".join(f"{d:+.2f}" for d in c["differences"]) or "–"
        interval = "–" if c["lo"] is None else f"[{c['lo']:+.2f}, {c['hi']:+.2f}]"
        sf = c["sign_flip"]
        flip = "–" if sf["p"] is None else f"{sf['p']:.3g} ({sf['smallest']:.3g})"
        welch = "–" if c.get("p_satterthwaite") is None else f"{c['p_satterthwaite']:.3g}"
        rows.append([c["arm"], f"{c['level']:g}", reach, miss, diff_cell(c, 2), per_seed, interval,
                     "–" if c["p"] is None else f"{c['p']:.3g}", welch, flip, "yes" if c["holm"] else "no",
                     "yes" if c["supported"] else "no"])  # fmt: skip
    head = ["arm", "pass@1", "seeds reaching", "not reaching", f"Δ {what}@{p.k}", "per seed", "95% interval",
            "p (t)", "p (Satterthwaite)", "sign-flip p", "Holm", "supported"]  # fmt: skip
    lines += table(head, rows)
    reached = [f"{c['arm']} at {c['level']:g} (seeds {', '.join(map(str, c['seeds']))})" for c in
               entry["comparisons"] if c["seeds"]]  # fmt: skip
    lines += ["", "Pairs reaching a common pass@1 level: " + ("; ".join(reached) if reached else "none") + "."]
    return [*lines, ""]


def _ood_lines(agg: dict[str, Any], study: Study) -> list[str]:
    o, b = study.eval.ood, agg["base"]["ood"]
    if o is None or b is None:
        return []
    ks = [k for k in agg["ks"] if k <= b["n"]]
    rows = [["base", *(num(b["pass_at_k"][str(k)]) for k in ks), "–", "–"]]
    for name, e in agg["arms"].items():
        if "ood" in e:
            vb = e["ood"]
            rows.append([name, *(pm(vb["pass_at_k"][str(k)]) for k in ks), _interval(vb["lost_at"][str(ks[-1])]),
                         _interval(vb["gained_at"][str(ks[-1])])])  # fmt: skip
    head = ["arm", *(f"pass@{k}" for k in ks), f"lost at {ks[-1]}", f"gained at {ks[-1]}"]
    return [f"## Out of distribution: `{o.task}` ({o.split}, {b['problems']} problems, n = {b['n']})", "",
            *table(head, rows), ""]  # fmt: skip


def _protocol_lines(agg: dict[str, Any], study: Study) -> list[str]:
    ks, lines = agg["ks"], []
    for q in study.eval.protocols:
        base = agg["base"]["protocols"].get(q.name)
        if base is None:
            continue
        rows = [["base", *(num(base[str(k)]) for k in ks), "–", "–"]]
        for name, e in agg["arms"].items():
            if q.name in e["protocols"]:
                v = e["protocols"][q.name]
                rows.append([name, *(pm(v["pass_at_k"][str(k)]) for k in ks), _interval(v["lost_at"][str(ks[-1])]),
                             _interval(v["gained_at"][str(ks[-1])])])  # fmt: skip
        head = ["arm", *(f"pass@{k}" for k in ks), f"lost at {ks[-1]}", f"gained at {ks[-1]}"]
        lines += [f"## Held-out at the end under protocol `{q.name}` (T = {q.temperature:g}, top-p {q.top_p:g}; "
                  "descriptive)", "", *table(head, rows), ""]  # fmt: skip
    return lines


def _diversity_lines(agg: dict[str, Any]) -> list[str]:
    b = agg["base"]["distinct"]
    rows = [["base", num(b["lines"], 2), num(b["lines_solved"], 2), num(b["answers"], 2)]]
    for name, e in agg["arms"].items():
        d = e["distinct"]
        rows.append([name, pm(d["lines"], 2), pm(d["lines_solved"], 2), pm(d["answers"], 2)])
    n = agg["base"]["n"]
    return ["## Distinct correct solutions per problem (end, held-out)", "",
            f"Of the n = {n} samples of a problem: distinct correct solution lines (completion texts, whitespace "
            "normalised; mean over all problems, an unsolved one counting 0, and over the problems with a correct "
            "sample) and distinct correct extracted answers (about 1 on one-answer problems: not informative about "
            "diversity). Diversity only; the payoff is the problems kept above.", "",
            *table(["arm", "solution lines", "solution lines (solved)", "answers"], rows), ""]  # fmt: skip


def _wall_lines(agg: dict[str, Any]) -> list[str]:
    rows = [[name, str(len(e["seeds"])), pm(e["wall"]["train_seconds"], 0), pm(e["wall"]["seconds_per_step"], 1),
             pm(e["wall"]["eval_seconds"], 0), str(e["wall"]["interrupted_attempts"])]
            for name, e in agg["arms"].items()]  # fmt: skip
    per_run = [[name, str(s), str(v["steps"]), f"{v['train_seconds']:.0f}", f"{v['eval_seconds']:.0f}",
                str(v.get("code"))] for name, e in agg["arms"].items() for s, v in e["per_seed"].items()]  # fmt: skip
    shared = ", ".join(f"{name} {v['seconds'] + v['interrupted_seconds']:.0f} s" for name, v in
                       agg["study_stages"].items())  # fmt: skip
    return ["## Wall time", "",
            "Per run: training and evaluation seconds over every invocation (an attempt cut by a kill counts up to its "
            f"last write). Shared stages: {shared or 'none recorded'}.", "",
            *table(["arm", "runs", "train s", "s/step", "eval s", "interrupted attempts"], rows), "",
            *table(["arm", "seed", "steps", "train s", "eval s", "code"], per_run), ""]  # fmt: skip


def render(agg: dict[str, Any], study: Study, command: str, config: str, out: str, figures: list[Path]) -> str:
    """The report as markdown."""
    lines = [*_header(agg, study, command, config, out), ""]
    if not agg["arms"]:
        return "\n".join([*lines, "No run has finished yet."]) + "\n"
    lines += [*_end_lines(agg), *_path_lines(agg)]
    if agg.get("primary"):
        lines += _primary_lines(agg["primary"], study)
    lines += [*_protocol_lines(agg, study), *_ood_lines(agg, study), *_diversity_lines(agg), *_wall_lines(agg)]
    if figures:
        lines += ["## Figures", "", *(f"![{f.stem}]({f.name})" for f in figures)]
    return "\n".join(lines) + "\n"
