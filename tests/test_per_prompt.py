"""Per-prompt comparisons of the collapse report: against the base at every k (bootstrap over seeds and prompts),
validity by the base's difficulty, and their tables."""

import numpy as np
import pytest

from collapse_bench.comparison_tables import (
    difficulty_table,
    levels_table,
    shifted_levels_table,
    versus_base_table,
)
from collapse_bench.per_prompt import by_difficulty, versus_base
from rlvr_div.exact import pass_at


def test_versus_base_mean_and_sign():
    base = [0.5, 0.2, 0.9, 0.1] * 5
    sharp = {1: [1.0, 0.0, 1.0, 0.0] * 5, 2: [1.0, 0.0, 1.0, 0.0] * 5}  # right or never: behind the base at large k
    out = versus_base(sharp, base, [1, 64])
    assert out["1"]["mean"] == pytest.approx(np.mean([1, 0, 1, 0]) - np.mean(base))
    expected = np.mean([1, 0, 1, 0]) - np.mean(1 - (1 - np.asarray(base)) ** 64)
    assert out["64"]["mean"] == pytest.approx(expected)
    assert out["64"]["hi"] < 0 and out["64"]["separated"]  # every resample has the base ahead at k = 64
    assert out["1"]["lo"] <= out["1"]["mean"] <= out["1"]["hi"]
    assert out["1"]["n_seeds"] == 2 and out["1"]["n_prompts"] == 20
    same = versus_base({1: base, 2: base}, base, [1, 8])
    assert all(v["mean"] == 0 and not v["separated"] for v in same.values())
    with pytest.raises(ValueError, match="3 prompts per run against 4"):
        versus_base({1: [0.1, 0.2, 0.3]}, base[:4], [1])
    assert versus_base({}, base, [1]) == {}


def test_versus_base_interval_includes_prompt_sampling():
    """Identical seeds: the interval comes from resampling prompts alone, and it widens with spread across prompts."""
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.8, 200)
    close = {s: base + 0.05 for s in range(3)}
    spread = {s: np.clip(base + 0.05 + rng.normal(0, 0.2, 200) * (s == 0) + np.linspace(-0.2, 0.2, 200), 0, 1)
              for s in range(3)}  # fmt: skip
    a, b = versus_base(close, base, [1])["1"], versus_base(spread, base, [1])["1"]
    assert a["hi"] - a["lo"] == pytest.approx(0.0, abs=1e-12)
    assert b["hi"] - b["lo"] > 0.01


def test_pass_at_and_bins():
    assert pass_at(np.array([0.0, 0.5, 1.0]), 2).tolist() == pytest.approx([0.0, 0.75, 1.0])
    base = [0.1, 0.6, 0.96, 1.0, 0.95]
    bins = by_difficulty({1: [0.2, 0.7, 1.0, 1.0, 0.9], 2: [0.4, 0.7, 1.0, 1.0, 0.7]}, base)
    assert [b["prompts"] for b in bins] == [1, 1, 3]
    assert bins[0]["mu"]["mean"] == pytest.approx(0.3) and bins[0]["base_mu"] == pytest.approx(0.1)
    assert bins[2]["mu"]["mean"] == pytest.approx(np.mean([(1 + 1 + 0.9) / 3, (1 + 1 + 0.7) / 3]))
    assert "mu" not in by_difficulty({1: [0.5]}, [0.5], bins=((0.0, 0.1), (0.1, 1.0)))[0]


def test_comparison_tables_render_what_they_are_given():
    entry = {"methods": {
        "grpo": {"label": "GRPO", "seeds": [1, 2],
                 "vs_base": {"test": versus_base({1: [1.0, 0.0] * 10, 2: [1.0, 0.0] * 10}, [0.5] * 20, [1, 8])},
                 "by_difficulty": {"test": by_difficulty({1: [1.0, 0.0], 2: [1.0, 0.0]}, [0.3, 0.97])}},
        "fkl": {"label": "forward KL", "seeds": [1, 2],
                "levels": [{"mu": 0.9, "seeds": [1],
                            "effective_answers": {"mean": 2.0, "half": None, "separated": False},
                            "kl_pstar": {"mean": -0.5, "half": 0.1, "separated": True}}]},
    }}  # fmt: skip
    versus = versus_base_table(entry, "test", [1, 8])
    assert versus[0] == "| method − base | Δ pass@1 | Δ pass@8 |" and versus[2].startswith("| GRPO | +0.0000 [-")
    assert versus[2].endswith("** |")  # at k = 8 the base (1 − 0.5^8) is ahead of a right-or-never policy
    assert difficulty_table(entry, "test")[2] == "| base | 0.300 | — | 0.970 |"
    assert levels_table(entry)[2] == "| forward KL | 2.00 / -0.50 ± 0.10 ** (1/2) |"
    assert versus_base_table(entry, "train", [1]) == [] and levels_table({"methods": {}}) == []


def test_a_level_difference_below_display_precision_prints_unmarked():
    """A separated difference of 3e-8 in pass@128 claims nothing: '≈ 0', no '**' (issue 32, item 4)."""
    tiny = {"mean": 2.9e-8, "half": 9.5e-9, "lo": 1.9e-8, "hi": 3.9e-8, "separated": True, "holm": False}
    mass = {"mean": 0.0268, "half": 0.0212, "lo": 0.0056, "hi": 0.048, "separated": True, "holm": True}
    entry = {"methods": {"a": {"label": "α-DPG", "seeds": [1, 2, 3],
                               "levels_shifted": [{"mu": 0.9, "seeds": [1, 2, 3], "shifted_pass_kmax": tiny,
                                                   "shifted_mass": mass}]}}}  # fmt: skip
    lines = shifted_levels_table(entry, 128)
    assert lines[0] == "| method vs baseline | μ = 0.9: Δ pass@128 (shifted) / Δ π(S) (seeds) |"
    assert lines[2] == "| α-DPG | ≈ 0 / 0.0268 ± 0.0212 ** † (3/3) |"
