"""What docs/study/collapse.md says of the first `routes` control (issue 58) is what its committed tables hold:
``bench/results/collapse_routes_swapped/collapse.json`` (the declared primary) and ``matched_verdicts.md``."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "results" / "collapse_routes_swapped"
DOCS = ROOT / "docs" / "study" / "collapse.md"


def _words() -> str:
    return " ".join(DOCS.read_text().split())


def _verdicts() -> dict[str, list[str]]:
    path = BENCH / "matched_verdicts.md"
    if not path.is_file():
        pytest.skip(f"{path} is not committed")
    rows = [line.strip("|").split("|") for line in path.read_text().splitlines() if line.startswith("| ")]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows[1:]}


def test_no_cell_is_claimed_and_the_intervals_are_as_said():
    text = (BENCH / "collapse.md").read_text()
    block = text.split("### The primary comparison", 1)[1].split("###", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| method")]
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
    base_row = next(r for r in (BENCH / "collapse.md").read_text().splitlines() if r.startswith("| base | 0.719 |"))
    assert base_row.split("|")[8].strip() == "0.557"  # the base's held-out long validity
    words = _words()
    assert "minority share 0.988 ± 0.003 on the training prompts, held-out `long` validity 0.012" in words
    assert "held-out `long` validity 0.416 and 0.480" in words and "at 0.767–0.786" in words
