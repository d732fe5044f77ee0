"""collapse_bench.countries_leakage: `countries`' held-out prefixes a training prefix answers, and the real-LM
studies' held-out numbers on the prefixes none does (recomputed from the committed per-prompt numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from collapse_bench.countries_leakage import REAL_LM, leakage, main, measure, pass_at, prefix_of

ROOT = Path(__file__).resolve().parents[1]


def test_leakage_counts_names_a_training_prefix_answers():
    assert prefix_of("A country whose name starts with B: Brazil\nA country whose name starts with Al:") == "Al"
    out = leakage(["Al", "Ma", "Z"], ["A", "Mal"])
    assert out["Al"] == 1.0 and out["Z"] == 0.0  # "Al" covered by "A"; nothing Z is trained
    assert 0 < out["Ma"] < 1  # Malawi, Malaysia, Maldives, Mali, Malta answer "Mal"; Madagascar does not
    assert pass_at(np.array([0.0, 0.5, 1.0]), 2) == pytest.approx([0.0, 0.75, 1.0])


def test_the_issues_numbers_and_the_clean_subset():
    if not (REAL_LM / "countries" / "base.json").is_file():
        pytest.skip("the real-LM studies are not committed")
    m = measure()
    c = m["countries"]
    assert round(c["mean_leakage"], 2) == 0.47 and len(c["covered_outright"]) == 13 and len(c["clean"]) == 15
    grpo = c["arms"]["grpo"]
    assert len(grpo["seeds"]) == 5 and all(d <= -0.5 for d in grpo["vs_base_problems_at_64"].values())
    assert grpo["sign_flip_p_at_64"] == 2 / 2**5 and grpo["vs_base"]["64"]["separated"]
    gemma = m["countries_gemma"]["arms"]["grpo"]
    assert all(d < 0 for d in gemma["vs_base_problems_at_64"].values()) and gemma["seeds_half_a_problem_below"] == 2
    committed = json.loads((REAL_LM / "countries_leakage" / "report.json").read_text())
    assert committed["countries"]["arms"]["grpo"]["vs_base_problems_at_64"] == {
        str(s): pytest.approx(d) for s, d in grpo["vs_base_problems_at_64"].items()
    }
    docs = " ".join((ROOT / "docs" / "collapse.md").read_text().split())
    lo, hi = sorted(grpo["vs_base_problems_at_64"].values())[::4]
    assert f"{-hi:.2f} to {-lo:.2f} of the 15 clean held-out problems at k = 64 in all 5 seeds" in docs


def test_the_command_writes_its_report(tmp_path):
    if not (REAL_LM / "countries" / "base.json").is_file():
        pytest.skip("the real-LM studies are not committed")
    assert main(["--out", str(tmp_path)]) == 0
    assert "python -m collapse_bench.countries_leakage --out" in (tmp_path / "report.md").read_text()
