"""What docs/study/collapse.md says of the two `routes` controls (issue 58) is what their committed tables hold:
``bench/results/collapse_routes_{swapped,equal}/collapse.md`` (the declared primary) and ``matched_verdicts.md``."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "results" / "collapse_routes_swapped"
EQUAL = ROOT / "bench" / "results" / "collapse_routes_equal"
DOCS = ROOT / "docs" / "study" / "collapse.md"


def _words() -> str:
    return " ".join(DOCS.read_text().split())


def _verdicts(bench: Path = BENCH) -> dict[str, list[str]]:
    path = bench / "matched_verdicts.md"
    if not path.is_file():
        pytest.skip(f"{path} is not committed")
    rows = [line.strip("|").split("|") for line in path.read_text().splitlines() if line.startswith("| ")]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows[1:]}


def _primary_rows(bench: Path) -> list[str]:
    text = (bench / "collapse.md").read_text()
    block = text.split("### The primary comparison", 1)[1].split("###", 1)[0]
    return [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| method")]


def _base_long_validity(bench: Path) -> str:
    """The base's held-out `long` validity: column 8 of the by-class table's base row."""
    text = (bench / "collapse.md").read_text()
    block = text.split("### By prompt class", 1)[1]
    row = next(r for r in block.splitlines() if r.startswith("| base |"))
    return row.split("|")[8].strip()


def test_no_cell_is_claimed_and_the_intervals_are_as_said():
    rows = _primary_rows(BENCH)
    assert len(rows) == 6 and all(r.rstrip(" |").endswith("no") for r in rows), rows
    assert any("+47.15 ± 72.84" in r and r.startswith("| MARA") for r in rows)
    deltas = sorted(float(r.split("|")[2].split("±")[0]) for r in rows if not r.startswith("| MARA"))
    assert (deltas[0], deltas[-1]) == (-24.08, -23.82)
    words = _words()
    assert "MARA +47.15 ± 72.84 problems lost against GRPO at k = 64, the other five −23.82 to −24.08" in words


def test_mara_collapses_onto_the_failing_minority_mode():
    v = _verdicts()
    # columns: training μ, held-out long validity, matched gain, seeds matched, sign-flip p, primary, KL, eff, share
    assert v["mara_01"][1] == "0.012" and v["mara_01"][8] == "0.988 ± 0.003"
    assert v["mara_01"][6] == "3.34 ± 0.64" and v["mara_01"][7] == "1.07 ± 0.02"
    assert v["grpo"][1] == "0.564" and v["grpo"][8] == "0.414 ± 0.406"
    assert (v["unlikeliness"][1], v["polychromic"][1]) == ("0.416", "0.480")
    near = [v[c][1] for c in ("alpha_dpg_05", "reverse_kl_1", "dph_forward_kl_05")]
    assert (min(near), max(near)) == ("0.767", "0.786")
    shares = [float(v[c][8].split()[0]) for c in ("alpha_dpg_05", "reverse_kl_1", "dph_forward_kl_05")]
    assert (min(shares), max(shares)) == (0.18, 0.2)
    assert all(float(v[c][6].split()[0]) <= 0.02 for c in ("alpha_dpg_05", "reverse_kl_1", "dph_forward_kl_05"))
    assert _base_long_validity(BENCH) == "0.557"
    words = _words()
    assert "minority share 0.988 ± 0.003 on the training prompts, held-out `long` validity 0.012" in words
    assert "held-out `long` validity 0.416 and 0.480" in words and "at 0.767–0.786" in words


def test_equal_control_claims_five_cells_and_not_dph():
    rows = {r.split("|")[1].strip(): r for r in _primary_rows(EQUAL)}
    assert len(rows) == 6
    claimed = {name for name, r in rows.items() if r.rstrip(" |").endswith("**yes**")}
    assert len(claimed) == 5 and not any(name.startswith("DPH-RL") for name in claimed), claimed
    delta = {name.split(",")[0]: rows[name].split("|")[2].strip().replace("-", "−") for name in rows}
    words = _words()
    said = (
        f"reverse KL at β = 1 {delta['GRPO + reverse KL (k3)']}, MARA {delta['MARA']}, the unlikeliness reward "
        f"{delta['unlikeliness reward']}, polychromic {delta['polychromic set advantage']}, α-DPG {delta['α-DPG']}; "
        f"not DPH-RL at η = 0.5 ({delta['DPH-RL']})"
    )
    assert said in words, said
    v = _verdicts(EQUAL)
    assert f"ends at {v['grpo'][1]} (the base's {_base_long_validity(EQUAL)})" in words


def test_equal_control_mara_still_collapses_onto_the_minority_mode():
    v = _verdicts(EQUAL)
    mara = v["mara_01"]
    assert float(mara[8].split()[0]) > 0.9 and float(mara[1]) > float(v["grpo"][1])
    words = _words()
    assert (
        f"minority share {mara[8]} on the training prompts, KL(p*‖π_v) {mara[6]}, {mara[7].split()[0]} effective "
        f"answers, held-out `long` validity {mara[1]}"
    ) in words
    near = ("alpha_dpg_05", "reverse_kl_1", "dph_forward_kl_05")
    shares = sorted(v[c][8].split()[0] for c in near)
    validity = sorted(v[c][1] for c in near)
    assert max(float(v[c][6].split()[0]) for c in near) == 0.12
    assert f"minority share {shares[0]}–{shares[-1]}, KL(p*‖π_v) ≤ 0.12) with held-out `long` validity " in words
    assert f"{validity[0]}–{validity[-1]}, below the base's" in words
    assert float(validity[-1]) < float(_base_long_validity(EQUAL))
    assert f"share to {v['unlikeliness'][8].split()[0]} and {v['polychromic'][8].split()[0]}" in words
    gains = sorted(float(v[c][2].split()[0]) for c in v if c != "grpo")
    assert f"({gains[0]:.3f} to {gains[-1]:.3f})" in words
    assert min(float(v[c][4]) for c in v if c != "grpo") == 0.062
