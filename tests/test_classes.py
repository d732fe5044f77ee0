"""Per-class measurements and comparisons (collapse_bench.measure's structure, collapse_bench.classes, the primary
comparison in a benchmark config) on hand-computed numbers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from collapse_bench.classes import claimed, class_table, lost_versus_baseline, primary_comparison
from collapse_bench.markdown import diff_cell
from collapse_bench.measure import Structure, minority_share, summarise
from collapse_bench.spec import Primary, load_benchmark
from rlvr_div.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_summarise_with_a_structure_counts_minority_mass_and_problems_per_class():
    # two prompts, three valid completions each; the last two take the minority strategy
    valid = [["d5", "c0;5", "c1;5"], ["d14", "c0;14", "c1;14"]]
    model = [np.log([0.5, 0.1, 0.1]), np.log([0.02, 0.01, 0.01])]
    base = [np.log([0.2, 0.1, 0.1]), np.log([0.1, 0.2, 0.1])]
    structure = Structure(minority=[[False, True, True]] * 2, classes=["short", "long"])
    out = summarise(["2+3=", "7+7="], valid, model, base, [1, 4], structure)
    assert out["per_prompt"]["minority_share"] == pytest.approx([0.2 / 0.7, 0.5])
    assert out["per_prompt"]["base_minority_share"] == pytest.approx([0.5, 0.75])
    long = out["mean"]["by_class"]["long"]
    mu, base_mu = 0.04, 0.4
    for k in (1, 4):  # one prompt: lost = P(base solves in k) · P(model does not), as a count of problems
        solves_b, solves_m = 1 - (1 - base_mu) ** k, 1 - (1 - mu) ** k
        assert long["lost_at"][str(k)] == pytest.approx(solves_b * (1 - solves_m))
        assert long["gained_at"][str(k)] == pytest.approx(solves_m * (1 - solves_b))
        assert long["pass_at"][str(k)] == pytest.approx(solves_m)
    assert long["problems"] == 1 and long["mu"] == pytest.approx(mu) and long["minority_share"] == pytest.approx(0.5)
    assert "by_class" not in summarise(["2+3="], valid[:1], model[:1], base[:1], [1])["mean"]  # no structure: as before


def test_minority_share_is_stable_for_tiny_masses():
    assert minority_share([-800.0, -800.0 + math.log(3)], [True, False]) == pytest.approx(0.25)


def _result(lost_long: float, share: float = 0.1) -> dict:
    by_class = {
        c: {"problems": 150, "mu": 0.5, "minority_share": share, "pass_at": {"256": 0.9},
            "lost_at": {"256": lost_long if c == "long" else 0.0}, "gained_at": {"256": 0.0}}
        for c in ("short", "long")
    }  # fmt: skip
    return {"splits": {"test": {"mean": {"by_class": by_class}}}}


def test_paired_comparisons_on_problems_lost_and_the_primary_family():
    grpo = {s: _result(x) for s, x in zip(range(1, 6), [30.0, 28.0, 33.0, 31.0, 29.0])}
    keeps = {s: _result(x) for s, x in zip(range(1, 6), [3.0, 2.0, 4.0, 3.5, 2.5])}  # ~27 fewer, every seed
    tiny = {s: _result(x) for s, x in zip(range(1, 6), [29.8, 27.8, 32.8, 30.8, 28.8])}  # 0.2 fewer: too small
    table = class_table(keeps, "test", [256])
    assert table["long"]["lost_at"]["256"]["mean"] == pytest.approx(3.0) and table["long"]["seeds"] == 5
    versus = lost_versus_baseline(keeps, grpo, "test", [256], 0.5)["long"]["256"]
    assert versus["mean"] == pytest.approx(-27.2) and versus["separated"] and versus["claimed"]
    small = lost_versus_baseline(tiny, grpo, "test", [256], 0.5)["long"]["256"]
    assert small["separated"] and not small["claimed"]  # separated, but under half a problem
    primary = Primary("routes", "test", "long", "lost_at", 256, 0.5)
    out = primary_comparison(primary, {"grpo": grpo, "keeps": keeps, "tiny": tiny}, "grpo")
    assert out["family"] == 2 and set(out["rows"]) == {"keeps", "tiny"}
    assert out["rows"]["keeps"]["holm"] and out["rows"]["keeps"]["claimed"]
    assert out["rows"]["tiny"]["holm"] and not out["rows"]["tiny"]["claimed"]
    assert not claimed({"separated": False, "mean": -27.0}, 0.5)


def test_differences_below_display_precision_print_as_approximately_zero_unmarked():
    zero = {"mean": 0.00002, "lo": -0.00001, "hi": 0.00004, "half": 0.00003, "separated": True, "claimed": True}
    assert diff_cell(zero, 4, claim=True) == "≈ 0"
    big = {"mean": -27.0, "lo": -29.0, "hi": -25.0, "half": 2.0, "separated": True, "claimed": True}
    assert diff_cell(big, 2, claim=True) == "-27.00 ± 2.00 **"
    assert diff_cell({**big, "claimed": False}, 2, claim=True) == "-27.00 ± 2.00"


@pytest.mark.parametrize(
    ("primary", "message"),
    [
        ({"task": "nope"}, "primary needs 'class'"),
        ({"task": "nope", "split": "test", "class": "long", "metric": "lost_at", "min_difference": 0.5, "k": 256},
         "primary.task 'nope' is not one of the tasks"),
        ({"task": "routes", "split": "dev", "class": "long", "metric": "lost_at", "min_difference": 0.5, "k": 256},
         "primary.split 'dev'"),
        ({"task": "routes", "split": "test", "class": "long", "metric": "lost", "min_difference": 0.5, "k": 256},
         "primary.metric 'lost'"),
        ({"task": "routes", "split": "test", "class": "long", "metric": "lost_at", "min_difference": 0.5, "k": 300},
         "primary.k 300"),
        ({"task": "routes", "split": "test", "class": "long", "metric": "lost_at", "min_difference": -1, "k": 256},
         "primary.min_difference must be a number >= 0"),
        ({"task": "routes", "split": "test", "class": "long", "metric": "lost_at", "min_difference": 0.5, "k": 256,
          "alpha": 1.5}, "primary.alpha must be a number in \\(0, 1\\)"),
        ({"task": "routes", "split": "test", "class": "long", "metric": "lost_at", "min_difference": 0.5, "k": 256,
          "holm": True}, "primary has an unknown key 'holm'"),
    ],
)  # fmt: skip
def test_a_bad_primary_section_is_one_line(primary, message):
    with pytest.raises(ConfigError, match=message):
        load_benchmark(REPO / "bench" / "collapse_routes.yaml", {"primary": primary})


def test_the_routes_grid_states_its_primary_comparison():
    bench = load_benchmark(REPO / "bench" / "collapse_routes.yaml")
    assert bench.primary == Primary("routes", "test", "long", "lost_at", 64, 0.5, 0.05)
    assert max(bench.evaluation.ks) == 256 and len(bench.seeds) == 5
    with pytest.raises(ConfigError, match="has no prompt classes"):
        load_benchmark(REPO / "bench" / "collapse.yaml", {"primary": {**bench.primary.describe(), "task": "carry"}})


def test_a_robustness_block_has_one_primary_family_per_setting():
    bench = load_benchmark(REPO / "bench" / "collapse_routes_robust.yaml")
    assert bench.primary.task == "*" and len(bench.tasks) == 5
    assert {t.task for t in bench.tasks} == {"routes"} and bench.primary.k == 64


def test_the_report_prints_the_sign_flip_p_and_intervals_clipped_to_what_a_count_can_take():
    """α-DPG's case on `routes`: lost 150, 0, 0, 0, 2 of 150 is 30.4 ± 83.0, whose t-interval reaches −52.6; the
    class table prints it clipped to [0, 150] (the stored interval is unchanged), the primary table prints the exact
    sign-flip p beside the t-test's (5 seeds, every difference negative: 2/32)."""
    from collapse_bench.class_report import class_lines, primary_lines

    grpo = {s: _result(x) for s, x in zip(range(1, 6), [30.0, 28.0, 33.0, 31.0, 29.0])}
    keeps = {s: _result(x) for s, x in zip(range(1, 6), [3.0, 2.0, 4.0, 3.5, 2.5])}
    wild = {s: _result(x) for s, x in zip(range(1, 6), [150.0, 0.0, 0.0, 0.0, 2.0])}
    results = {"grpo": grpo, "keeps": keeps, "wild": wild}
    primary = primary_comparison(Primary("routes", "test", "long", "lost_at", 256, 0.5), results, "grpo")
    assert primary["rows"]["keeps"]["sign_flip_p"] == pytest.approx(2 / 32)
    methods = {
        name: {"label": name, "by_class": {"test": class_table(r, "test", [256])},
               "lost_vs_baseline": {"test": lost_versus_baseline(r, grpo, "test", [256], 0.5)}}
        for name, r in results.items()
    }  # fmt: skip
    base = {c: {"problems": 150, "mu": 0.5, "minority_share": 0.1, "pass_at": {"256": 0.9}} for c in ("short", "long")}
    entry = {"primary": primary, "methods": methods, "base_by_class": {"test": base}}
    lost = methods["wild"]["by_class"]["test"]["long"]["lost_at"]["256"]
    assert round(lost["mean"], 1) == 30.4 and round(lost["half"], 1) == 83.0 and round(lost["lo"], 1) == -52.6
    wild_row = next(line for line in class_lines(entry, "test", 256) if line.startswith("| wild |"))
    assert "30.40 [0.00, 113.42]" in wild_row and "-52.6" not in wild_row
    keeps_row = next(line for line in class_lines(entry, "test", 256) if line.startswith("| keeps |"))
    assert "3.00 ± " in keeps_row  # inside [0, 150]: printed as before
    table = primary_lines(entry)
    assert "| method − baseline | Δ | p | p (sign-flip) | Holm | claimed |" in table
    row = next(line for line in table if line.startswith("| keeps |"))
    assert row.split(" | ")[3] == "0.0625"  # 2/32, beside the t-test's p
