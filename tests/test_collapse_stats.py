"""Seed statistics of the collapse benchmark against hand-computed values."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from collapse_bench.stats import (
    clopper_pearson_upper,
    holm_paired,
    mean_ci,
    paired_difference,
    paired_p_value,
    t_cdf,
    t_quantile,
)


@pytest.mark.parametrize(
    ("df", "q975"),
    [(1, 12.706204736174707), (2, 4.302652729749464), (4, 2.7764451051977934), (9, 2.2621571628540993),
     (30, 2.0422724563012373)],
)  # fmt: skip
def test_t_quantile_matches_tables(df, q975):
    assert t_quantile(0.975, df) == pytest.approx(q975, rel=1e-7)
    assert t_quantile(0.025, df) == pytest.approx(-q975, rel=1e-7)
    assert t_cdf(q975, df) == pytest.approx(0.975, abs=1e-9)


@pytest.mark.parametrize(
    ("successes", "trials", "upper"),
    [(1, 10, 0.3942), (5, 20, 0.4556)],  # one-sided 95% Clopper-Pearson tables
)
def test_clopper_pearson_upper_matches_tables(successes, trials, upper):
    assert clopper_pearson_upper(successes, trials) == pytest.approx(upper, abs=1e-4)


@pytest.mark.parametrize(("successes", "trials"), [(0, 5), (2, 30), (11, 16), (40, 64)])
def test_clopper_pearson_upper_is_where_the_binomial_tail_is_five_percent(successes, trials):
    p = clopper_pearson_upper(successes, trials)
    tail = sum(math.comb(trials, i) * p**i * (1 - p) ** (trials - i) for i in range(successes + 1))
    assert tail == pytest.approx(0.05, abs=1e-9) and successes / trials < p


def test_clopper_pearson_upper_edges():
    assert clopper_pearson_upper(0, 16) == pytest.approx(1 - 0.05 ** (1 / 16), rel=1e-9)  # closed form at zero
    assert clopper_pearson_upper(7, 7) == 1.0
    with pytest.raises(ValueError, match="successes <= trials"):
        clopper_pearson_upper(3, 2)


def test_t_cdf_of_one_degree_of_freedom_is_cauchy():
    for t in (-3.0, -0.5, 0.0, 0.7, 5.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)


def test_mean_ci_by_hand():
    ci = mean_ci([0.5, 0.7, 0.9])  # mean 0.7, sd 0.2, t_{0.975,2} = 4.3027
    assert ci["mean"] == pytest.approx(0.7) and ci["sd"] == pytest.approx(0.2)
    assert ci["half"] == pytest.approx(4.302652729749464 * 0.2 / math.sqrt(3))
    assert ci["lo"] == pytest.approx(0.7 - ci["half"]) and ci["n"] == 3
    assert mean_ci([0.4])["half"] is None and mean_ci([])["mean"] is None


def test_paired_difference_by_hand():
    method = {0: 0.80, 1: 0.75, 2: 0.90, 3: 0.5}
    base = {0: 0.60, 1: 0.65, 2: 0.70}  # seed 3 is unpaired: dropped
    d = paired_difference(method, base)  # differences 0.2, 0.1, 0.2: mean 1/6, sd 0.057735
    assert d["seeds"] == [0, 1, 2]
    assert d["mean"] == pytest.approx(1 / 6)
    assert d["half"] == pytest.approx(4.302652729749464 * 0.05773502691896258 / math.sqrt(3))
    assert d["separated"] is True  # 0.1667 ± 0.1434 excludes 0
    same = paired_difference({0: 1.0, 1: 0.0, 2: 0.5}, {0: 0.0, 1: 1.0, 2: 0.5})
    assert same["mean"] == pytest.approx(0.0) and same["separated"] is False


def _point(step, mu, eff, cov=0.5, kl=1.0):
    return {"step": step, "mu": mu, "effective_answers": eff, "cov_at_kmax": cov, "kl_pstar": kl}


def test_path_value_at_interpolates_at_the_first_crossing():
    from collapse_bench.measure import path_value_at

    # validity 0.6 -> 0.8 -> 0.7 -> 0.95; effective answers 14 -> 10 -> 9 -> 3
    path = [_point(20, 0.8, 10.0), _point(0, 0.6, 14.0), _point(40, 0.7, 9.0), _point(60, 0.95, 3.0)]
    assert path_value_at(path, 0.7, "effective_answers") == pytest.approx(12.0)  # first crossing: steps 0-20
    assert path_value_at(path, 0.9, "effective_answers") == pytest.approx(9.0 + (0.2 / 0.25) * (3.0 - 9.0))
    assert path_value_at(path, 0.6, "effective_answers") == pytest.approx(14.0)
    assert path_value_at(path, 0.96, "effective_answers") is None  # never reached
    assert path_value_at(path, 0.5, "effective_answers") is None  # below every point


def test_matched_validity_pairs_each_seed_with_its_own_baseline_path():
    from collapse_bench.aggregate import matched_validity

    def end(mu, eff, cov, kl):
        return {"splits": {"train": {"mean": {"mu": mu, "effective_answers": eff, "kl_pstar": kl,
                                              "cov_at": {"16": cov}}}}}  # fmt: skip

    baseline = {
        s: {"trajectory": [_point(0, 0.6, 14.0, 0.9, 0.0), _point(10, 0.9, 4.0 + s, 0.4, 3.0 + s)]} for s in (1, 2, 3)
    }
    method = {1: end(0.75, 10.0, 0.8, 0.5), 2: end(0.84, 9.0, 0.7, 1.0), 3: end(0.95, 12.0, 0.9, 0.1)}
    out = matched_validity(method, baseline, kmax=16)
    # seed 1 at mu 0.75: baseline eff 14 + 0.5 * (5 - 14) = 9.5; seed 2 at 0.84: 14 + 0.8 * (6 - 14) = 7.6;
    # seed 3 at 0.95: the baseline never got there
    assert out["seeds"] == [1, 2] and out["unmatched"] == [3]
    d = out["effective_answers"]
    assert d["mean"] == pytest.approx(((10.0 - 9.5) + (9.0 - 7.6)) / 2)
    assert d["half"] == pytest.approx(12.706204736174707 * abs(0.5 - 1.4) / math.sqrt(2) / math.sqrt(2))
    cov = out["cov_at_kmax"]  # seed 1: 0.8 - (0.9 + 0.5 * (0.4 - 0.9)) = 0.15; seed 2: 0.7 - 0.5 = 0.2
    assert cov["mean"] == pytest.approx(0.175)


def test_inert_grid_values_are_the_ones_with_identical_trained_weights(tmp_path):
    """Tuning runs whose models hash the same are grouped (values that change nothing), and the report says so."""
    from collapse_bench.aggregate import inert_values
    from collapse_bench.engine import RESULT, run_dir
    from collapse_bench.report import inert_lines
    from collapse_bench.spec import Run, load_benchmark, run_identity

    smoke = Path(__file__).resolve().parent / "fixtures" / "collapse_smoke.yaml"
    config = tmp_path / "bench.yaml"
    text = smoke.read_text().replace(
        "tune: {divergence_coef: [0.1, 0.01]}", "tune: {divergence_coef: [0.3, 0.1, 0.01]}"
    )
    config.write_text(text.replace("../../recipes", str(smoke.parents[2] / "recipes")))
    bench = load_benchmark(config)
    fingerprints = {0.3: "sha256:aaa", 0.1: "sha256:bbb", 0.01: "sha256:aaa"}
    for value, fingerprint in fingerprints.items():
        run = Run("pairsum", "grpo_reverse_kl", value, bench.tune_seed)
        directory = run_dir(tmp_path / "out", run.key)
        directory.mkdir(parents=True)
        result = {"identity": run_identity(bench, run), "fingerprint": fingerprint}
        (directory / RESULT).write_text(json.dumps(result))
    assert inert_values(bench, tmp_path / "out", "pairsum", "grpo_reverse_kl") == [[0.3, 0.01]]
    assert inert_values(bench, tmp_path / "out", "pairsum", "grpo") == []  # no grid
    entry = {"methods": {"grpo_reverse_kl": {"tune_key": "divergence_coef", "inert_values": [[0.3, 0.01]]},
                         "grpo": {"tune_key": None, "inert_values": []}}}  # fmt: skip
    lines = inert_lines(entry)
    assert len(lines) == 2 and "`grpo_reverse_kl`" in lines[1] and "divergence_coef 0.3 = 0.01" in lines[1]
    assert inert_lines({"methods": {"grpo": {"inert_values": []}}}) == []


def test_cells_that_trained_identical_models_are_grouped_and_reported():
    from collapse_bench.aggregate import identical_cells
    from collapse_bench.report import inert_lines

    fingerprints = {
        "grpo": {1: "a", 2: "b"},
        "mara_1": {1: "a", 2: "b"},  # identical to grpo at every seed
        "mara_01": {1: "a", 2: "c"},  # identical at one seed only: a real difference
        "pkpo": {1: "d"},
        "unfinished": {},
    }
    assert identical_cells(fingerprints) == [["grpo", "mara_1"]]
    assert identical_cells({"a": {1: "x"}, "b": {2: "x"}}) == []  # no seed in common: nothing claimed
    lines = inert_lines({"methods": {}, "identical_cells": [["grpo", "mara_1"]]})
    assert len(lines) == 2 and "`grpo` = `mara_1`" in lines[1]


def test_paired_p_value_and_holm_against_hand_values():
    from collapse_bench.stats import holm, paired_p_value, t_cdf

    # d = 1, 2, 3: mean 2, sd 1, t = 2·√3 with 2 degrees of freedom
    diff = paired_difference({1: 1.0, 2: 2.0, 3: 3.0}, {1: 0.0, 2: 0.0, 3: 0.0})
    assert paired_p_value(diff) == pytest.approx(2 * (1 - t_cdf(2 * math.sqrt(3), 2)), rel=1e-12)
    assert paired_p_value(diff) == pytest.approx(0.07417990022744847, rel=1e-6)  # scipy.stats.ttest_1samp
    assert paired_p_value({"n": 1, "mean": 1.0, "sd": None}) is None
    # Holm at 0.05 over 4: 0.01 <= 0.0125 rejected, 0.02 <= 0.0167 is not, so neither are the rest
    assert holm({"a": 0.01, "b": 0.02, "c": 0.03, "d": 0.5}) == {"a": True, "b": False, "c": False, "d": False}
    assert holm({"a": 0.01, "b": 0.015, "c": None}) == {"a": True, "b": True, "c": False}  # m = 2: 0.025, 0.05
    assert holm({}) == {}


def test_crossovers_are_a_median_and_every_seed_never_a_mean():
    from collapse_bench.aggregate import _ci_table
    from collapse_bench.report import _crossover

    table = _ci_table({1: {"crossover_k": 2.0}, 2: {"crossover_k": 8.0}, 3: {"crossover_k": math.inf}})
    cell = _crossover(table["crossover_k"], 3)
    assert cell == "median 2 (k = 2, 8; 2/3), none (1/3)"  # the lower median: a k some seed had
    table = _ci_table({1: {"crossover_k": 2.0}, 2: {"crossover_k": 8.0}, 3: {"crossover_k": 4.0}})
    assert _crossover(table["crossover_k"], 3) == "median 4 (k = 2, 4, 8; 3/3)"


def test_matched_levels_compares_both_paths_seed_by_seed_at_each_validity():
    from collapse_bench.aggregate import matched_levels

    def path(points):
        return [{"step": 5 * i, "mu": mu, "effective_answers": e} for i, (mu, e) in enumerate(points)]

    method = {1: path([(0.3, 18.0), (0.5, 16.0), (0.9, 12.0)]), 2: path([(0.3, 18.0), (0.7, 14.0)])}
    baseline = {1: path([(0.3, 18.0), (0.7, 10.0), (0.95, 5.0)]), 2: path([(0.3, 18.0), (0.9, 6.0)]), 3: path([])}
    out = matched_levels(method, baseline, [0.5, 0.8], keys=("effective_answers",))
    # μ = 0.5: seed 1: method 16 (a point), baseline 18 + (0.2/0.4)·(10 − 18) = 14 → +2; seed 2: method
    # 18 + (0.2/0.4)·(14 − 18) = 16, baseline 18 + (0.2/0.6)·(6 − 18) = 14 → +2
    assert out[0]["seeds"] == [1, 2] and out[0]["effective_answers"]["mean"] == pytest.approx(2.0)
    # μ = 0.8: seed 1: method 16 + (0.3/0.4)·(12 − 16) = 13, baseline 10 + (0.1/0.25)·(5 − 10) = 8 → +5; seed 2's
    # method path never reaches 0.8, so only seed 1 is compared
    assert out[1]["seeds"] == [1] and out[1]["effective_answers"]["mean"] == pytest.approx(5.0)


def test_holm_paired_marks_each_difference_and_counts_only_the_tested():
    """p from the paired t-test, then Holm: the clear difference survives (p ≤ α/2), the noisy one does not, and
    a one-seed difference has no p-value and is not part of the family's size."""
    clear = paired_difference({1: 1.0, 2: 1.1, 3: 0.9, 4: 1.05}, {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0})
    noisy = paired_difference({1: 1.0, 2: -1.0, 3: 0.5, 4: -0.4}, {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0})
    single = paired_difference({1: 1.0}, {1: 0.0})
    family = {"clear": clear, "noisy": noisy, "single": single}
    assert holm_paired(family) == 2
    assert clear["p"] == paired_p_value(clear) and clear["p"] <= 0.025 and clear["holm"] is True
    assert noisy["p"] > 0.05 and noisy["holm"] is False
    assert single["p"] is None and single["holm"] is False


def test_sign_flip_p_by_hand():
    """Exact two-sided sign-flip permutation p: with 5 pairs all of one sign only the observed signs and their mirror
    reach the observed |mean|: 2/32 = 0.0625, the smallest p 5 seeds allow, however large the differences."""
    from collapse_bench.stats import sign_flip_p

    assert sign_flip_p([-1.0, -2.0, -3.0, -4.0, -5.0]) == 2 / 32
    assert sign_flip_p([-100.0, -0.1, -3.0, -4.0, -5.0]) == 2 / 32
    assert sign_flip_p([1.0, 2.0, 3.0]) == 2 / 8
    # 1, −1, 2, 3 (sum 5): |±1 ±1 ±2 ±3| ≥ 5 for the signs (+,+,+,+), (+,−,+,+), (−,−,+,+) and their mirrors: 6 of 16
    assert sign_flip_p([1.0, -1.0, 2.0, 3.0]) == 6 / 16
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0 and sign_flip_p([]) is None
    d = paired_difference({s: 0.0 for s in range(1, 6)}, {s: float(s) for s in range(1, 6)})
    assert d["sign_flip_p"] == 0.0625 and d["mean"] == -3.0


def test_intervals_print_clipped_to_what_the_outcome_can_take():
    from collapse_bench.markdown import clipped, diff_cell, pm

    lost = {"mean": 30.4, "half": 83.0, "lo": -52.6, "hi": 113.4}  # problems lost of 150: can't be below 0
    assert pm(lost, 1) == "30.4 ± 83.0"  # no bounds given: as before
    assert pm(lost, 1, low=0, high=150) == "30.4 [0.0, 113.4]"
    assert pm({"mean": 140.0, "half": 20.0, "lo": 120.0, "hi": 160.0}, 1, low=0, high=150) == "140.0 [120.0, 150.0]"
    assert pm({"mean": 3.0, "half": 1.0, "lo": 2.0, "hi": 4.0}, 1, low=0, high=150) == "3.0 ± 1.0"
    assert pm({"mean": 0.98, "half": 0.03}, 2, low=0, high=1) == "0.98 [0.95, 1.00]"  # ends from mean ± half
    assert clipped({"mean": 0.5, "half": 0.1}, 0, 1) is None and clipped({"mean": 1.0}, 0, 1) is None
    diff = {"mean": -140.0, "half": 20.0, "lo": -160.0, "hi": -120.0}
    assert diff_cell(diff, 1, low=-150, high=150) == "-140.0 [-150.0, -120.0]"
    assert diff_cell(diff, 1) == "-140.0 ± 20.0"
    assert lost == {"mean": 30.4, "half": 83.0, "lo": -52.6, "hi": 113.4}  # the stored interval is not changed


def test_an_end_past_a_bound_by_less_than_display_precision_is_not_clipped():
    from collapse_bench.markdown import pm

    assert pm({"mean": 1.0, "half": 1e-12, "lo": 1.0 - 1e-12, "hi": 1.0 + 1e-12}, 3, low=0, high=1) == "1.000 ± 0.000"
    assert pm({"mean": 0.004, "half": 0.01, "lo": -0.006, "hi": 0.014}, 2, low=0) == "0.00 [0.00, 0.01]"


def test_holm_adjusted_p_rejects_exactly_what_holm_rejects():
    from collapse_bench.stats import holm, holm_adjusted

    rng = np.random.default_rng(0)
    for _ in range(200):
        ps = {i: float(p) for i, p in enumerate(rng.uniform(0, 0.08, size=int(rng.integers(1, 9))))}
        adjusted = holm_adjusted(ps)
        assert {k: a <= 0.05 for k, a in adjusted.items()} == holm(ps, 0.05)
    assert holm_adjusted({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})


def test_pooled_holm_reads_a_block_as_one_family(tmp_path, capsys):
    """Two settings of two tests each: each own family (m = 2) holds both at p 0.02, the pooled family (m = 4) holds
    none; an unseparated row never holds."""
    from collapse_bench.pooled_holm import block_rows, main, pooled

    def row(p: float, separated: bool = True) -> dict:
        return {"mean": -3.0, "lo": -5.0, "hi": -1.0 if separated else 1.0, "n": 3, "p": p, "separated": separated,
                "claimed": separated and p <= 0.025}  # fmt: skip

    for name, rows in {"a": {"x": row(0.02), "y": row(0.02)}, "b": {"x": row(0.02), "y": row(0.001, False)}}.items():
        (tmp_path / name).mkdir()
        report = {"tasks": {"t": {"primary": {"rows": rows}}}}
        (tmp_path / name / "collapse.json").write_text(json.dumps(report))
    block = pooled(block_rows({n: tmp_path / n for n in "ab"}))
    assert [v["own_family"] for v in block.values()] == [True, True, True, False]
    assert [v["pooled"] for v in block.values()] == [False, False, False, False]
    assert block[("b", "t", "y")]["pooled_p"] == pytest.approx(0.004)
    out = tmp_path / "pooled.md"
    assert main(["--report", str(tmp_path / "a"), "--report", str(tmp_path / "b"), "--out", str(out)]) == 0
    assert "0 of 4 comparisons held" in capsys.readouterr().out and "block's 4 tests" in out.read_text()
    assert main(["--report", str(tmp_path / "c"), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: no report at ")


def _own_family_row(p: float, mean: float = -3.0, separated: bool = True) -> dict:
    return {"mean": mean, "lo": mean - 2.0, "hi": mean / 2 if separated else 1.0, "n": 3, "p": p,
            "separated": separated}  # fmt: skip


def _write_block(tmp_path: Path, families: dict[str, dict[str, dict]], min_difference: float = 0.5) -> dict:
    """One report per family (one task ``t``), each row's ``claimed`` by its own family's Holm (as
    classes.primary_comparison sets it), and the reports' paths."""
    from collapse_bench.classes import claimed
    from collapse_bench.stats import holm

    for name, rows in families.items():
        survives = holm({method: row["p"] for method, row in rows.items()}, 0.05)
        for method, row in rows.items():
            row["claimed"] = survives[method] and claimed(row, min_difference)
        (tmp_path / name).mkdir()
        spec = {"min_difference": min_difference, "alpha": 0.05}
        (tmp_path / name / "collapse.json").write_text(
            json.dumps({"tasks": {"t": {"primary": {"spec": spec, "rows": rows}}}})
        )
    return {name: tmp_path / name for name in families}


def test_pooled_holm_takes_a_claim_its_own_family_holds_and_never_adds_one(tmp_path):
    """Own family holds, the pool does not: report a's family {x 0.01, y 0.04} holds both (0.01 <= 0.05/2, then
    0.04 <= 0.05); pooled with b's {w 0.03 (interval across 0), z 0.0001} (m = 4) y's adjusted p is 0.06 and the pool
    drops it. The other way, own family not holding and the pool holding, cannot come from the p-values (the pool's
    adjusted p is never below the own family's, next test); it came from the rule: z is −0.3 problems, under the
    declared 0.5, so its report does not claim it, and with the declared smallest difference read the pool does not
    either (pooled p 0.0004; before, the pool held it)."""
    from collapse_bench.pooled_holm import block_rows, pooled

    reports = _write_block(tmp_path, {"a": {"x": _own_family_row(0.01), "y": _own_family_row(0.04)},
                                      "b": {"w": _own_family_row(0.03, separated=False),
                                            "z": _own_family_row(0.0001, mean=-0.3)}})  # fmt: skip
    block = pooled(block_rows(reports))
    own = {key[::2]: v["own_family"] for key, v in block.items()}
    held = {key[::2]: v["pooled"] for key, v in block.items()}
    assert own == {("a", "x"): True, ("a", "y"): True, ("b", "w"): False, ("b", "z"): False}
    # pooled p: z 0.0001·4, x 0.01·3 = 0.03, w max(0.03, 0.03·2) = 0.06, y max(0.06, 0.04) = 0.06
    assert {key[::2]: v["pooled_p"] for key, v in block.items()} == pytest.approx(
        {("a", "x"): 0.03, ("a", "y"): 0.06, ("b", "w"): 0.06, ("b", "z"): 0.0004})  # fmt: skip
    assert held == {("a", "x"): True, ("a", "y"): False, ("b", "w"): False, ("b", "z"): False}
    assert block[("b", "t", "z")]["pooled_p"] <= 0.05 and not block[("b", "t", "z")]["pooled"]  # |Δ| 0.3 < 0.5


def test_pooled_holm_adjusted_p_never_falls_below_the_own_familys():
    """Over random blocks of random families: the pooled adjusted p of every test is at least its own family's, so
    a claim held pooled is held by its own family (ties included: p-values drawn from a coarse grid)."""
    from collapse_bench.pooled_holm import pooled
    from collapse_bench.stats import holm, holm_adjusted

    rng = np.random.default_rng(1)
    for _ in range(300):
        families = {f: {m: float(rng.choice([0.001, 0.005, 0.01, 0.02, 0.03, 0.04, 0.2]))
                        for m in range(int(rng.integers(1, 4)))} for f in range(int(rng.integers(1, 6)))}  # fmt: skip
        pool = holm_adjusted({(f, m): p for f, ps in families.items() for m, p in ps.items()})
        rows = {}
        for f, ps in families.items():
            own = holm_adjusted(ps)
            survives = holm(ps, 0.05)
            assert all(pool[(f, m)] >= own[m] - 1e-15 for m in ps)
            for m, p in ps.items():
                rows[(str(f), "t", str(m))] = _own_family_row(p) | {"claimed": survives[m], "min_difference": 0.5}
        block = pooled(rows)
        assert all(v["own_family"] for v in block.values() if v["pooled"])


def test_satterthwaite_in_matched_with_prompts_from_n_minus_1_to_prompts_minus_1():
    """The df the matched comparison reports: n − 1 where the prompts add no variance (every prompt the same),
    P − 1 where the seeds add none (every seed the same), between otherwise; its p and half-width use it."""
    from collapse_bench.per_prompt import matched_with_prompts, satterthwaite_df
    from collapse_bench.stats import t_test_p

    def path(end: list[float]) -> list[dict]:  # μ 0.25 -> 0.75 on every prompt: μ 0.5 halfway, exactly
        return [{"step": t, "mu": mu, "kl_pstar": sum(kl) / len(kl),
                 "per_prompt": {"mu": [mu] * len(kl), "kl_pstar": kl}}
                for t, mu, kl in ((0, 0.25, [0.0] * len(end)), (10, 0.75, end))]  # fmt: skip

    prompts = 8
    grpo = {s: path([2.0] * prompts) for s in (1, 2, 3)}
    flat = {s: path([1.0 + 0.25 * s] * prompts) for s in (1, 2, 3)}  # seeds differ, prompts do not (dyadic: exact)
    out = matched_with_prompts(flat, grpo, 0.5, "kl_pstar", resamples=100)
    assert out["se_prompts"] == 0 and out["df_satterthwaite"] == 2.0 and out["p_satterthwaite"] == out["p"]
    assert out["half_satterthwaite"] == pytest.approx(out["half"])
    spread = [0.25 * x for x in range(prompts)]
    same = {s: path(spread) for s in (1, 2, 3)}  # every seed the same, prompts differ
    out = matched_with_prompts(same, grpo, 0.5, "kl_pstar", resamples=200)
    assert out["se_seeds"] == 0 and out["se_prompts"] > 0 and out["df_satterthwaite"] == pytest.approx(prompts - 1)
    both = {s: path([x + 0.25 * s for x in spread]) for s in (1, 2, 3)}
    out = matched_with_prompts(both, grpo, 0.5, "kl_pstar", resamples=200)
    df = satterthwaite_df(out["se_seeds"] ** 2, 2, out["se_prompts"] ** 2, prompts - 1)
    assert out["df_satterthwaite"] == pytest.approx(df) and 2 < df < 2 + prompts - 1
    se = math.hypot(out["se_seeds"], out["se_prompts"])
    assert out["p_satterthwaite"] == pytest.approx(t_test_p(out["mean"], se, df)) and out["p_satterthwaite"] < out["p"]
    assert (
        out["half_satterthwaite"] == pytest.approx(t_quantile(0.975, df) * se)
        and out["half_satterthwaite"] < out["half"]
    )
    one = matched_with_prompts({1: flat[1]}, {1: grpo[1]}, 0.5, "kl_pstar")  # one seed: nothing to test, keys kept
    assert one["df_satterthwaite"] is None and one["p_satterthwaite"] is None and one["half_satterthwaite"] is None


def test_satterthwaite_df_limits_and_a_prompt_dominated_case():
    from collapse_bench.per_prompt import satterthwaite_df

    assert satterthwaite_df(0.3, 4, 0.0, 31) == 4.0  # no prompt part: the seeds' n − 1
    assert satterthwaite_df(0.0, 4, 0.3, 31) == pytest.approx(31.0)  # no seed part: the prompts' P − 1
    assert satterthwaite_df(0.0, 4, 0.0, 31) == 4.0
    both = satterthwaite_df(0.054**2, 4, 0.323**2, 31)  # countries at μ 0.8: the prompts dominate
    expected = (0.054**2 + 0.323**2) ** 2 / (0.054**4 / 4 + 0.323**4 / 31)
    assert 4 < both <= 4 + 31 and both == pytest.approx(expected)  # between the smaller df and their sum
