"""The collapse report's tables of comparisons that need no chosen end point: every method against the untrained base
at every k (intervals over seeds and prompts), validity by the base's difficulty, and diversity at fixed validities
along both training paths (against stock GRPO, seed by seed), and pass@k under a shifted verifier."""

from __future__ import annotations

from typing import Any

from collapse_bench.markdown import below_precision, marked
from collapse_bench.markdown import pm as _cell
from collapse_bench.markdown import table as _table


def versus_base_table(entry: dict[str, Any], split: str, ks: list[int]) -> list[str]:
    """Δ pass@k against the base, per method and k: mean [95% interval over seeds and prompts]; ** where the
    interval excludes 0 and the difference is at least half a problem (negative: the base ahead); '≈ 0' where the
    mean and the interval are 0 at display precision."""
    rows = []
    for m in entry["methods"].values():
        by_k = (m.get("vs_base") or {}).get(split)
        if not by_k:
            continue
        cells = []
        for k in ks:
            d = by_k[str(k)]
            if below_precision([d["mean"], d["lo"], d["hi"]], 4):
                cells.append("≈ 0")
                continue
            mean, lo, hi = (round(d[key], 4) + 0.0 for key in ("mean", "lo", "hi"))  # + 0.0: no "-0.0000"
            cells.append(f"{mean:+.4f} [{lo:+.4f}, {hi:+.4f}]" + (" **" if d["separated"] else ""))
        rows.append([m["label"]] + cells)
    if not rows:
        return []
    return _table(["method − base"] + [f"Δ pass@{k}" for k in ks], rows)


def difficulty_table(entry: dict[str, Any], split: str) -> list[str]:
    """Mean validity per bin of the base's validity A(x), per method (mean ± 95% t-interval over seeds)."""
    rows, bins = [], None
    for m in entry["methods"].values():
        per_bin = (m.get("by_difficulty") or {}).get(split)
        if not per_bin:
            continue
        bins = bins or per_bin
        rows.append([m["label"]] + [_cell(b.get("mu")) for b in per_bin])
    if not rows or bins is None:
        return []
    header = ["method"]
    base_row = ["base"]
    for b in bins:
        lo, hi = b["range"]
        header.append(f"A ∈ [{lo:g}, {hi:g}{']' if hi == 1.0 else ')'} ({b['prompts']} prompts)")
        base_row.append("—" if b.get("base_mu") is None else f"{b['base_mu']:.3f}")
    return _table(header, [base_row] + rows)


def _paired(diff: dict[str, Any], digits: int) -> str:
    """A paired difference at a fixed validity: 'mean ± half-width' with its marks, or '≈ 0', unmarked, where the mean
    and both ends of its interval round to 0 at ``digits`` (a difference below display precision claims nothing)."""
    ends = [diff[k] for k in ("mean", "lo", "hi") if diff.get(k) is not None]
    if diff.get("mean") is not None and below_precision(ends, digits):
        return "≈ 0"
    return marked(diff, digits)


def _at_levels(entry: dict[str, Any], key: str, columns: tuple[tuple[str, int], ...], heading: str) -> list[str]:
    """Per method and fixed validity μ (``m[key]``, one dict per μ): the paired differences ``columns`` (name,
    digits), '/'-separated, then the seeds whose two paths both reach μ, out of all; ``heading`` names a μ column."""
    rows, levels = [], None
    for m in entry["methods"].values():
        lv = m.get(key)
        if not lv:
            continue
        levels = levels or [x["mu"] for x in lv]
        n = len(m.get("seeds") or [])
        cells = [m["label"]]
        for x in lv:
            cells.append(" / ".join(_paired(x[c], d) for c, d in columns) + f" ({len(x['seeds'])}/{n})")
        rows.append(cells)
    if not rows or levels is None:
        return []
    return _table(["method vs baseline"] + [heading.format(mu=mu) for mu in levels], rows)


def levels_table(entry: dict[str, Any]) -> list[str]:
    """Per method and fixed validity μ: Δ effective answers and Δ KL(p*‖π_v) against the baseline, both read off the
    two runs' training paths at μ, paired by seed (seeds whose two paths both reach μ, out of all)."""
    return _at_levels(entry, "levels", (("effective_answers", 2), ("kl_pstar", 2)),
                      "μ = {mu:g}: Δ eff. answers / Δ KL(p*‖π_v) (seeds)")  # fmt: skip


def shifted_table(entry: dict[str, Any], split: str, ks: list[int]) -> list[str]:
    """The shifted verifier (it accepts only the valid answers outside the base's 3 likeliest of each prompt):
    π(S) and pass@k under it on ``split`` at the end of training, the base first; mean ± 95% t-interval over seeds."""
    base = entry["base"].get(split) or {}
    if base.get("shifted_mass") is None:
        return []
    header = ["method", "π(S)"] + [f"pass@{k} (shifted)" for k in ks] + [f"lost@{ks[-1]} (shifted)"]
    rows = [["base", f"{base['shifted_mass']:.4f}"] + [f"{base[f'shifted_pass_at_{k}']:.3f}" for k in ks] + ["—"]]
    for m in entry["methods"].values():
        s = (m.get("splits") or {}).get(split) or {}
        if "shifted_mass" not in s:
            continue
        rows.append([m["label"], _cell(s["shifted_mass"], 4)] + [_cell(s[f"shifted_pass_at_{k}"]) for k in ks]
                    + [_cell(s[f"shifted_lost_at_{ks[-1]}"], 2)])  # fmt: skip
    return _table(header, rows)


def shifted_levels_table(entry: dict[str, Any], kmax: int) -> list[str]:
    """Per method and fixed validity μ of the training prompts: Δ pass@K under the shifted verifier and Δ π(S)
    against the baseline, read off both training paths at μ, paired by seed (seeds whose two paths reach μ)."""
    return _at_levels(entry, "levels_shifted", (("shifted_pass_kmax", 3), ("shifted_mass", 4)),
                      f"μ = {{mu:g}}: Δ pass@{kmax} (shifted) / Δ π(S) (seeds)")  # fmt: skip
