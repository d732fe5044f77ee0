"""The shifted verifier (collapse_bench.measure.shifted_summary): a held-out check that accepts only the valid answers
outside the base's 3 likeliest of each prompt; its pass@k is computed exactly from the measured distribution."""

import math

import pytest

from collapse_bench.aggregate import flat_metrics
from collapse_bench.comparison_tables import shifted_table
from collapse_bench.measure import shifted_masses, shifted_summary, summarise, trajectory_point


def _logs(ps):
    return [math.log(p) for p in ps]


BASE = [_logs([0.4, 0.2, 0.1, 0.05, 0.05]), _logs([0.1, 0.3, 0.2, 0.15, 0.05])]
POLICY = [_logs([0.9, 0.05, 0.01, 0.02, 0.01]), _logs([0.01, 0.5, 0.2, 0.09, 0.2])]


def test_the_shifted_set_is_the_valid_set_less_the_base_top_three():
    # prompt 1: the base's top 3 are answers 0, 1, 2 → S = {3, 4}; prompt 2: top 3 are 1, 2, 3 → S = {0, 4}
    assert shifted_masses(POLICY, BASE) == pytest.approx([0.03, 0.21])
    assert shifted_masses(BASE, BASE) == pytest.approx([0.10, 0.15])
    # ties keep the first listed among the top
    assert shifted_masses([_logs([0.25] * 4)], [_logs([0.25] * 4)]) == pytest.approx([0.25])
    # a task whose valid sets hold at most 3 answers has no shifted verifier
    assert shifted_masses([_logs([0.5, 0.5])], [_logs([0.5, 0.5])]) is None


def test_pass_at_k_under_the_shifted_verifier_is_exact():
    out = shifted_summary(POLICY, BASE, [1, 8])
    assert out["pass_at"]["1"] == pytest.approx((0.03 + 0.21) / 2)
    assert out["pass_at"]["8"] == pytest.approx(((1 - 0.97**8) + (1 - 0.79**8)) / 2)
    assert out["base_pass_at"]["8"] == pytest.approx(((1 - 0.9**8) + (1 - 0.85**8)) / 2)
    b8, m8 = [1 - 0.9**8, 1 - 0.85**8], [1 - 0.97**8, 1 - 0.79**8]
    assert out["lost_at"]["8"] == pytest.approx(sum(b * (1 - m) for b, m in zip(b8, m8)))
    assert out["gained_at"]["8"] == pytest.approx(sum((1 - b) * m for b, m in zip(b8, m8)))


def test_the_measurement_records_it_along_paths_and_in_the_flat_metrics():
    valid = [["a", "b", "c", "d", "e"]] * 2
    summary = summarise(["x", "y"], valid, POLICY, BASE, [1, 8])
    assert summary["per_prompt"]["shifted_mass"] == pytest.approx([0.03, 0.21])
    point = trajectory_point(summary["mean"], 8)
    assert point["shifted_mass"] == pytest.approx(0.12)
    assert point["shifted_pass_kmax"] == pytest.approx(summary["mean"]["shifted"]["pass_at"]["8"])
    flat = flat_metrics(summary, [1, 8])
    assert flat["shifted_pass_at_kmax"] == flat["shifted_pass_at_8"] == summary["mean"]["shifted"]["pass_at"]["8"]
    base_flat = flat_metrics(summarise(["x", "y"], valid, BASE, BASE, [1, 8]), [1, 8])
    entry = {"base": {"test": base_flat}, "methods": {"m": {"label": "M", "splits": {"test": {
        k: {"mean": v, "half": None} for k, v in flat.items() if k.startswith("shifted")}}}}}  # fmt: skip
    table = shifted_table(entry, "test", [1, 8])
    assert table[2].startswith("| base | 0.1250 |") and table[3].startswith("| M | 0.1200 |")
    # one answer per prompt: no shifted verifier, nothing recorded
    one = summarise(["x"], [["a"]], [[math.log(0.5)]], [[math.log(0.4)]], [1])
    assert "shifted" not in one["mean"] and "shifted_mass" not in trajectory_point(one["mean"], 1)


def test_holm_runs_over_every_method_and_level_of_the_shifted_family():
    from collapse_bench.aggregate import holm_families
    from collapse_bench.stats import paired_difference

    big = paired_difference({1: 0.5, 2: 0.52, 3: 0.51}, {1: 0.0, 2: 0.0, 3: 0.0})
    small = paired_difference({1: 0.01, 2: -0.02, 3: 0.015}, {1: 0.0, 2: 0.0, 3: 0.0})
    entry = {"methods": {
        "a": {"levels_shifted": [{"shifted_pass_kmax": dict(big)}, {"shifted_pass_kmax": dict(small)}]},
        "b": {"levels_shifted": [{"shifted_pass_kmax": dict(big)}]},
        "grpo": {},
    }}  # fmt: skip
    holm_families(entry)
    assert entry["holm_family_shifted"] == 3
    flags = [lv["shifted_pass_kmax"]["holm"] for m in ("a", "b") for lv in entry["methods"][m]["levels_shifted"]]
    assert flags == [True, False, True]
