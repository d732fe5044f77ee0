"""The findings of docs/study/collapse.md checked against the committed report files (collapse.json): a number or a
quantifier ("most", "no cell", "every seed") that stops being true fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from collapse_bench.markdown import num
from collapse_bench.measure import path_value_at
from collapse_bench.pooled_holm import block_rows, pooled
from collapse_bench.stats import sign_flip_p

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "study" / "collapse.md"


def _report(name: str) -> dict:
    path = RESULTS / name / "collapse.json"
    if not path.is_file():
        pytest.skip(f"{path} is not committed")
    return json.loads(path.read_text())


def _finding(number: int) -> str:
    """Finding `number` of docs/study/collapse.md, whitespace collapsed: what a test checks must still be said."""
    block = re.search(r"<!-- findings -->\n(.*?)<!-- /findings -->", DOCS.read_text(), re.S).group(1)
    match = re.search(rf"^{number}\. (.*?)(?=^\d+\. |^\*\*|\Z)", block, re.S | re.M)
    assert match, f"docs/study/collapse.md has no finding {number}"
    return " ".join(match.group(1).split())


def test_finding_6_most_of_the_loss_comes_before_095():
    entry = _report("collapse")["tasks"]["skewsum"]
    paths = [p for p in entry["baseline_paths"].values() if p]
    at = {mu: np.mean([path_value_at(p, mu, "effective_answers") for p in paths]) for mu in (0.75, 0.9, 0.95)}
    base = entry["base"]["train"]["effective_answers"]
    end = entry["methods"]["grpo"]["splits"]["train"]["effective_answers"]["mean"]
    assert [round(base, 2), round(at[0.75], 2), round(at[0.9], 2), round(at[0.95], 2), round(end, 2)] == [
        6.23, 5.93, 5.02, 3.99, 2.25
    ]  # fmt: skip
    assert base - at[0.95] > at[0.95] - end  # "most of the loss comes before μ = 0.95"
    assert "most of the loss (6.23 → 3.99) comes before μ = 0.95" in DOCS.read_text()


def test_finding_8_no_cell_of_the_grid_has_the_base_ahead_by_the_rule():
    entry = _report("collapse")["tasks"]["carry"]
    ahead = [
        (name, k)
        for name, m in entry["methods"].items()
        for k, d in (m.get("vs_base") or {}).get("test", {}).items()
        if d["separated"] and d["mean"] < 0
    ]
    assert ahead == []
    grpo = entry["methods"]["grpo"]["splits"]["test"]["crossover_k"]
    assert grpo["per_seed"] == [32, 32] and grpo["never"] == 3  # "2 of the 5 seeds ... k = 32 in both"
    for name in ("forward_kl_1", "reverse_kl_1", "pkpo", "passk_training"):  # "never overtakes"
        assert entry["methods"][name]["splits"]["test"]["crossover_k"]["never"] == 5, name


def test_finding_8_at_200_steps_the_base_is_ahead_at_32_and_64_not_at_128():
    grpo = _report("collapse_carry200")["tasks"]["carry"]["methods"]["grpo"]
    vs = grpo["vs_base"]["test"]
    assert vs["32"]["separated"] and vs["64"]["separated"] and not vs["128"]["separated"]
    assert vs["32"]["mean"] < 0 and round(-vs["32"]["problems"], 1) == 0.9 and round(-vs["64"]["problems"], 1) == 0.6
    crossover = grpo["splits"]["test"]["crossover_k"]
    assert crossover["per_seed"] == [16] * 4 and crossover["never"] == 1  # "k = 16 in 4 of the 5 seeds"


def _pm(d: dict, digits: int) -> str:
    """A t-summary as the docs print it: "mean ± half"."""
    return f"{d['mean']:.{digits}f} ± {d['half']:.{digits}f}"


def test_finding_7_rl_generalises_on_both_tasks():
    """7: held-out validity rises on both tasks, from the base's to GRPO's (mean ± half), separated from the base."""
    text = _finding(7)
    tasks = _report("collapse")["tasks"]
    for task in ("skewsum", "carry"):
        base = tasks[task]["base"]["test"]["mu"]
        grpo = tasks[task]["methods"]["grpo"]
        assert f"{base:.3f} → {_pm(grpo['splits']['test']['mu'], 3)} (`{task}`)" in text, task
        rise = grpo["vs_base"]["test"]["1"]  # Δ pass@1 = Δ validity, seeds × prompts interval
        assert rise["separated"] and rise["lo"] > 0, task
    assert "0.708 → 0.954 ± 0.016 (`skewsum`) and 0.725 → 0.923 ± 0.010 (`carry`)" in text


def test_finding_9_at_matched_validity_alpha_dpg_keeps_the_most_of_p_star():
    """9: α-DPG (α = 0.25) +2.62 ± 0.24 effective answers against GRPO's path at its validity, surviving Holm, ending
    at 5.84 of p*'s 6.23; "the most of p*": of the cells that move towards p* at matched validity (Δ KL(p*‖π_v) < 0),
    the two α-DPG cells have the largest gains in effective answers and the largest falls in KL."""
    text = _finding(9)
    entry = _report("collapse")["tasks"]["skewsum"]
    matched = {n: m["matched_validity"] for n, m in entry["methods"].items() if m.get("matched_validity")}
    dpg = matched["alpha_dpg_025"]["effective_answers"]
    assert f"+{_pm(dpg, 2)} effective answers" in text and dpg["holm"] and dpg["lo"] > 0
    end = entry["methods"]["alpha_dpg_025"]["splits"]["train"]["effective_answers"]["mean"]
    p_star = entry["base"]["train"]["effective_answers"]
    assert f"ending at {end:.2f} of p*'s {p_star:.2f}" in text and end < p_star
    toward = {n: v for n, v in matched.items() if v["kl_pstar"]["mean"] < 0}
    by_eff = sorted(toward, key=lambda n: -toward[n]["effective_answers"]["mean"])
    by_kl = sorted(toward, key=lambda n: toward[n]["kl_pstar"]["mean"])
    assert set(by_eff[:2]) == set(by_kl[:2]) == {"alpha_dpg_025", "alpha_dpg_05"}
    held = [n for n, v in toward.items() if v["kl_pstar"]["holm"]]  # of the KL falls that survive Holm, the largest
    assert min(held, key=lambda n: toward[n]["kl_pstar"]["mean"]) == "alpha_dpg_025"


def test_finding_10_more_valid_answers_is_not_more_of_p_star():
    """10: the unlikeliness reward and outcome exploration end with more effective answers than p* (10.4, 11.0) but
    are farther from p* than GRPO at their validity (Δ KL(p*‖π_v) +0.30 ± 0.03, +0.46 ± 0.08, both separated)."""
    text = _finding(10)
    entry = _report("collapse")["tasks"]["skewsum"]
    p_star = entry["base"]["train"]["effective_answers"]
    ends, kls = [], []
    for name in ("unlikeliness", "outcome_exploration"):
        m = entry["methods"][name]
        end = m["splits"]["train"]["effective_answers"]["mean"]
        matched = m["matched_validity"]
        assert end > p_star and matched["effective_answers"]["lo"] > 0, name  # "more valid answers"
        assert matched["kl_pstar"]["lo"] > 0, name  # "farther from p* than GRPO at their validity"
        ends.append(f"{end:.1f}")
        kls.append("+" + _pm(matched["kl_pstar"], 2))
    assert f"end with {ends[0]} and {ends[1]} effective answers" in text
    assert f"(Δ KL(p*‖π_v) {kls[0]} and {kls[1]})" in text


def test_finding_11_dph_rl_lowers_validity_on_the_near_perfect_prompts():
    """11: on the training prompts near-perfect for the base (base validity ≥ 0.95) DPH-RL ends below the base and
    below GRPO, on `carry` (quoted: η = 0.05, 0.919 ± 0.022 against GRPO's 0.987 ± 0.001) and `skewsum`, both η."""
    text = _finding(11)
    tasks = _report("collapse")["tasks"]

    def near_perfect(task: str, name: str) -> tuple[float, dict]:
        top = tasks[task]["methods"][name]["by_difficulty"]["train"][-1]
        assert top["range"] == [0.95, 1.0]
        return top["base_mu"], top["mu"]

    for task in ("carry", "skewsum"):
        _, grpo = near_perfect(task, "grpo")
        for name in ("dph_forward_kl_005", "dph_forward_kl_05"):
            base, dph = near_perfect(task, name)
            assert dph["hi"] < base and dph["hi"] < grpo["lo"], (task, name)
    _, dph = near_perfect("carry", "dph_forward_kl_005")
    _, grpo = near_perfect("carry", "grpo")
    assert f"`carry` near-perfect training prompts {_pm(dph, 3)} (η = 0.05) against GRPO's {_pm(grpo, 3)}" in text


def test_finding_12_mara_best_on_routes_hurts_on_skewsum():
    """12: on `routes` MARA loses the fewest `long` problems (none, tied with the unlikeliness reward, at higher
    `long` validity); on `skewsum` it ends at validity 0.838 ± 0.019, below GRPO's, with 4.00 fewer effective
    answers than GRPO at its validity (separated)."""
    text = _finding(12)
    routes = _report("collapse_routes")["tasks"]["routes"]["methods"]
    long = {n: m["by_class"]["test"]["long"] for n, m in routes.items()}
    fewest = min(round(v["lost_at"]["64"]["mean"], 1) for v in long.values())
    tied = [n for n, v in long.items() if round(v["lost_at"]["64"]["mean"], 1) == fewest]
    assert fewest == 0 and "mara_01" in tied
    assert max(tied, key=lambda n: long[n]["mu"]["mean"]) == "mara_01"
    skew = _report("collapse")["tasks"]["skewsum"]["methods"]
    mu = skew["mara_01"]["splits"]["train"]["mu"]
    assert mu["hi"] < skew["grpo"]["splits"]["train"]["mu"]["lo"]
    fewer = skew["mara_01"]["matched_validity"]["effective_answers"]
    assert fewer["hi"] < 0
    assert f"validity {_pm(mu, 3)} and {-fewer['mean']:.2f} fewer effective answers than GRPO at its validity" in text


def test_findings_1_to_3_routes_grpo_loses_problems_11_of_21_remedies_claimed_alpha_dpg_not():
    entry = _report("collapse_routes")["tasks"]["routes"]

    def long(name: str) -> dict:
        return entry["methods"][name]["by_class"]["test"]["long"]

    grpo = long("grpo")
    assert round(grpo["lost_at"]["64"]["mean"], 1) == 44.5 and round(grpo["mu"]["mean"], 3) == 0.019  # 1
    claimed = sorted(name for name, d in entry["primary"]["rows"].items() if d["claimed"])
    assert entry["primary"]["family"] == 21 and len(claimed) == 11  # 2: "claimed ... for 11 cells"
    assert {"mara_01", "unlikeliness", "reverse_kl_1", "forward_kl_1", "sequence_kl_03", "dph_forward_kl_05", "pkpo",
            "passk_training", "clip_cov", "alpha_01", "reverse_kl_01"} == set(claimed)  # fmt: skip
    assert round(long("mara_01")["mu"]["mean"], 3) == 0.952 and round(long("unlikeliness")["mu"]["mean"], 3) == 0.416
    assert not entry["primary"]["rows"]["alpha_dpg_05"]["claimed"]  # 3
    assert round(long("alpha_dpg_05")["lost_at"]["64"]["mean"], 1) == 30.4


def test_findings_1_to_3_the_numbers_of_their_sentences():
    """1: the minority share on trained-class (`short`) held-out prompts 0.166 → 0.020 ± 0.004, 44.5 ± 11.9 of 150
    `long` problems lost at k = 64. 2: MARA and the unlikeliness reward lose none (to display precision) at GRPO's
    training validity (their intervals overlap it or lie above); reverse KL β = 0.1, the α-divergence and Clip-Cov
    still lose 19.7, 12.6 and 5.1; MARA's top share 0.972 and KL(p*‖π_v) 2.56 against GRPO's 0.23; `long` validity
    0.952 ± 0.009, 0.416 ± 0.003 and GRPO's 0.019 ± 0.004. 3: α-DPG loses all 150 in 1 of 5 seeds, 30.4 ± 83.0."""
    entry = _report("collapse_routes")["tasks"]["routes"]
    methods = entry["methods"]
    short = {n: m["by_class"]["test"]["short"] for n, m in methods.items()}
    long = {n: m["by_class"]["test"]["long"] for n, m in methods.items()}
    base = entry["base_by_class"]["test"]
    one = _finding(1)
    assert f"falls from {base['short']['minority_share']:.3f} to {_pm(short['grpo']['minority_share'], 3)}" in one
    assert f"loses {_pm(long['grpo']['lost_at']['64'], 1)} of {base['long']['problems']} held-out `long`" in one
    two = _finding(2)
    for name in ("mara_01", "unlikeliness"):  # "lose none at GRPO's validity"
        assert round(long[name]["lost_at"]["64"]["mean"], 1) == 0.0, name
        assert methods[name]["splits"]["train"]["mu"]["hi"] >= methods["grpo"]["splits"]["train"]["mu"]["lo"], name
    still = [f"{long[n]['lost_at']['64']['mean']:.1f}" for n in ("reverse_kl_01", "alpha_01", "clip_cov")]
    assert f"still lose {still[0]}, {still[1]} and {still[2]}" in two and min(map(float, still)) > 0
    mara, grpo = methods["mara_01"]["splits"]["train"], methods["grpo"]["splits"]["train"]
    assert f"top share {mara['top_share']['mean']:.3f} on the training prompts" in two
    assert f"KL(p*‖π_v) {mara['kl_pstar']['mean']:.2f} against GRPO's {grpo['kl_pstar']['mean']:.2f}" in two
    assert f"from {base['long']['mu']:.3f} to {_pm(long['mara_01']['mu'], 3)}" in two
    assert f"holds it at {_pm(long['unlikeliness']['mu'], 3)}, against GRPO's {_pm(long['grpo']['mu'], 3)}" in two
    three = _finding(3)
    runs = RESULTS / "collapse_routes" / "runs" / "routes" / "alpha_dpg_05" / "default"
    per_seed = [json.loads((runs / f"seed{s}" / "result.json").read_text())["splits"]["test"]["mean"]["by_class"][
        "long"]["lost_at"]["64"] for s in (1, 2, 3, 4, 5)]  # fmt: skip
    assert sum(round(x) == 150 for x in per_seed) == 1 and "in 1 of 5 seeds" in three
    assert f"mean {_pm(long['alpha_dpg_05']['lost_at']['64'], 1)} lost" in three


def test_findings_4_and_5_pooled_holm_over_the_14_tests_and_the_numbers_of_their_sentences():
    """4: by Holm pooled over the 14 tests of findings 4–5 MARA holds in all settings but G = 4 (adjusted p 0.097),
    α-DPG in two of five; −127.5 ± 15.2 at learning rate 1e-3; MARA's training validity below GRPO's at 1e-4 and
    1e-3 (0.929 against 0.950, 0.910 against 0.949). 5: the four differences on the two other bases, and MARA's
    trained-class validity on the seed-2 base (0.866 against GRPO's 0.983)."""
    robust = _report("collapse_routes_robust")["tasks"]
    bases = {f"seed{n}": _report(f"collapse_routes_base_seed{n}")["tasks"]["routes"] for n in (1, 2)}
    rows = {(t, n): r for t, e in {**robust, **bases}.items() for n, r in e["primary"]["rows"].items()}
    assert len(rows) == 14
    names = ["collapse_routes_robust", "collapse_routes_base_seed1", "collapse_routes_base_seed2"]
    block = pooled(block_rows({name: RESULTS / name for name in names}))
    adjusted = {(t if r == names[0] else r[-5:], n): v["pooled_p"] for (r, t, n), v in block.items()}
    held = {(t if r == names[0] else r[-5:], n) for (r, t, n), v in block.items() if v["pooled"]}
    table = (RESULTS / names[0] / "pooled_holm.md").read_text()  # the committed table is what this computes
    assert all(f"| {num(v['pooled_p'])} | {'yes' if v['pooled'] else 'no'} |" in table for v in block.values())
    assert sum(v["pooled"] for v in block.values()) == 10
    assert {v["n"] for v in block.values()} == {3} and sign_flip_p([-1.0, -2.0, -3.0]) == 0.25
    assert "With 3 seeds an exact sign-flip test cannot go below p = 0.25" in _finding(4)
    assert sorted(t for t, n in held if n == "mara_01" and t in robust) == sorted(set(robust) - {"routes_g4"})
    assert sorted(t for t, n in held if n == "alpha_dpg_05" and t in robust) == ["routes_g16", "routes_lr1e-4"]
    assert {("seed1", "mara_01"), ("seed2", "mara_01"), ("seed1", "alpha_dpg_05"), ("seed2", "alpha_dpg_05")} <= held
    four = _finding(4)
    assert f"adjusted p {adjusted[('routes_g4', 'mara_01')]:.3f}" in four
    assert "α-DPG's three of five (two pooled)" in four
    assert f"{_pm(rows[('routes_lr1e-3', 'mara_01')], 1).replace('-', '−')} problems lost" in four
    mu = {t: {n: e["methods"][n]["splits"]["train"]["mu"]["mean"] for n in ("grpo", "mara_01")} for t, e in
          robust.items()}  # fmt: skip
    assert [t for t, m in mu.items() if m["mara_01"] < m["grpo"]] == ["routes_lr1e-4", "routes_lr1e-3"]
    lr4, lr3 = mu["routes_lr1e-4"], mu["routes_lr1e-3"]
    assert (f"({lr4['mara_01']:.3f} against {lr4['grpo']:.3f}, {lr3['mara_01']:.3f} against {lr3['grpo']:.3f})"
            in four)  # fmt: skip
    five = _finding(5)

    def delta(n: int, name: str) -> str:
        return _pm(bases[f"seed{n}"]["primary"]["rows"][name], 1).replace("-", "−")

    assert f"MARA ({delta(1, 'mara_01')} and {delta(2, 'mara_01')} problems lost against GRPO)" in " ".join(
        five.split())  # fmt: skip
    assert f"α-DPG ({delta(1, 'alpha_dpg_05')} and {delta(2, 'alpha_dpg_05')})" in five
    short = {n: m["by_class"]["test"]["short"]["mu"] for n, m in bases["seed2"]["methods"].items()}
    assert short["mara_01"]["hi"] < short["grpo"]["lo"]
    assert f"({short['mara_01']['mean']:.3f} against GRPO's {short['grpo']['mean']:.3f})" in five


def test_finding_4_routes_robustness_block():
    """Finding 4 (R5, docs/study/collapse_details.md): MARA's claim holds in every setting of the robustness block,
    α-DPG's in three of five; stock GRPO loses `long` problems in every setting."""
    report = _report("collapse_routes_robust")
    claimed = {
        t: sorted(n for n, d in e["primary"]["rows"].items() if d["claimed"]) for t, e in report["tasks"].items()
    }
    assert claimed == {
        "routes_lr1e-4": ["alpha_dpg_05", "mara_01"],
        "routes_lr1e-3": ["mara_01"],
        "routes_g4": ["alpha_dpg_05", "mara_01"],
        "routes_g16": ["alpha_dpg_05", "mara_01"],
        "routes_300steps": ["mara_01"],
    }
    assert all(e["primary"]["family"] == 2 for e in report["tasks"].values())
    lost = {t: round(e["methods"]["grpo"]["by_class"]["test"]["long"]["lost_at"]["64"]["mean"], 1)
            for t, e in report["tasks"].items()}  # fmt: skip
    assert lost == {"routes_lr1e-4": 4.1, "routes_lr1e-3": 136.3, "routes_g4": 59.2, "routes_g16": 45.5,
                    "routes_300steps": 116.6}  # fmt: skip
    # "one seed of three loses (nearly) all 150 `long` problems again" where α-DPG is not claimed
    for task in ("routes_lr1e-3", "routes_300steps"):
        per_seed = [
            json.loads((RESULTS / "collapse_routes_robust" / "runs" / task / "alpha_dpg_05" / "default" / f"seed{s}"
                        / "result.json").read_text())["splits"]["test"]["mean"]["by_class"]["long"]["lost_at"]["64"]
            for s in (1, 2, 3)
        ]  # fmt: skip
        assert sum(x > 140 for x in per_seed) == 1, (task, per_seed)


def test_finding_5_two_more_pretraining_seeds_of_the_base():
    """Finding 5 (R6, docs/study/collapse_details.md): on tiny3-seed1 and tiny3-seed2 both remedies are claimed against
    stock GRPO; no α-DPG run loses all 150."""
    for n, grpo_lost, base_long in ((1, 32.8, 0.148), (2, 84.3, 0.047)):
        entry = _report(f"collapse_routes_base_seed{n}")["tasks"]["routes"]
        rows = entry["primary"]["rows"]
        assert entry["primary"]["family"] == 2 and rows["alpha_dpg_05"]["claimed"] and rows["mara_01"]["claimed"]
        long = entry["methods"]["grpo"]["by_class"]["test"]["long"]
        assert round(long["lost_at"]["64"]["mean"], 1) == grpo_lost
        base = json.loads((RESULTS / f"collapse_routes_base_seed{n}" / "base" / "routes.json").read_text())
        assert round(base["splits"]["test"]["summary"]["mean"]["by_class"]["long"]["mu"], 3) == base_long
        runs = RESULTS / f"collapse_routes_base_seed{n}" / "runs" / "routes" / "alpha_dpg_05" / "default"
        lost = [json.loads((runs / f"seed{s}" / "result.json").read_text())["splits"]["test"]["mean"]["by_class"][
            "long"]["lost_at"]["64"] for s in (1, 2, 3)]  # fmt: skip
        assert max(lost) < 140


def _beta_run(arm: str, beta: str, seed: int) -> dict:
    path = RESULTS / "beta_v2_anneal" / "runs" / arm / beta / f"seed{seed}" / "result.json"
    if not path.is_file():
        pytest.skip(f"{path} is not committed")
    return json.loads(path.read_text())


def test_finding_14_annealed_ascent_reaches_p_beta_at_every_beta_and_held_out_prompts_lose_diversity():
    """Finding 14 (bench/beta_v2_anneal.yaml): every β reached in every start, the primary comparison far under its
    0.05-nat threshold on the training prompts, and the held-out prompts' diversity falls."""
    betas, seeds = ("1", "0.3", "0.1", "0.03", "0.01"), (1, 2, 3)
    kl_to_p_beta = [_beta_run("anneal", b, s)["path"][-1]["kl_p_beta"] for b in betas for s in seeds]
    assert round(min(kl_to_p_beta), 6) == 1.2e-5 and round(max(kl_to_p_beta), 4) == 1.6e-3  # "at most 1.6e-3 nats"
    train = {b: [_beta_run("anneal", b, s)["splits"]["train"]["mean"] for s in seeds] for b in ("1", "0.01")}
    rise = [b["kl_pstar"] - a["kl_pstar"] for a, b in zip(train["1"], train["0.01"])]
    assert [round(x, 4) for x in sorted(rise)] == [0.0006, 0.0008, 0.0009]  # "+0.0006 to +0.0009 nats"
    test = {b: [_beta_run("anneal", b, s)["splits"]["test"]["mean"] for s in seeds] for b in ("1", "0.01")}
    eff = [x["effective_answers"] for x in test["0.01"]]
    assert round(float(np.mean([x["effective_answers"] for x in test["1"]])), 2) == 5.77 and round(
        float(np.mean(eff)), 2) == 4.29  # fmt: skip
    held_out_rise = [b["kl_pstar"] - a["kl_pstar"] for a, b in zip(test["1"], test["0.01"])]
    assert [round(min(held_out_rise), 2), round(max(held_out_rise), 2)] == [0.60, 0.87]  # "by 0.60–0.87 nats"
    contrast = _beta_run("exact", "0.01", 1)["splits"]["train"]["mean"]["kl_pstar"]
    assert round(contrast, 2) == 0.20  # "drifts to KL 0.20 at β = 0.01"


def test_finding_13_the_shifted_verifier_separates_nothing_at_128_and_sees_grpo_at_8():
    entry = _report("collapse_shifted")["tasks"]["skewsum"]
    base, methods = entry["base"]["test"], entry["methods"]
    test = {name: m["splits"]["test"] for name, m in methods.items()}
    assert round(base["shifted_mass"], 3) == 0.179 and round(base["shifted_pass_at_8"], 3) == 0.765
    grpo, dpg = test["grpo"], test["alpha_dpg_025"]
    assert [round(grpo["shifted_mass"]["mean"], 3), round(grpo["shifted_mass"]["half"], 3)] == [0.066, 0.007]
    assert [round(grpo["shifted_pass_at_8"]["mean"], 3), round(grpo["shifted_pass_at_8"]["half"], 3)] == [0.417, 0.031]
    assert [round(dpg["shifted_mass"]["mean"], 3), round(dpg["shifted_pass_at_8"]["mean"], 3)] == [0.235, 0.863]
    assert [round(dpg["mu"]["mean"], 3), round(grpo["mu"]["mean"], 3)] == [0.938, 0.934]  # "the same validity"
    assert round(min(s["shifted_pass_at_128"]["mean"] for s in test.values()), 3) == 0.944  # "at least 0.944"
    for name, m in methods.items():  # "separates no method": every primary difference is below display precision
        for level in m.get("levels_shifted") or []:
            d = level["shifted_pass_kmax"]
            if d.get("mean") is not None:
                assert all(round(d[k], 3) == 0 for k in ("mean", "lo", "hi") if d.get(k) is not None), (name, level)
    assert "separates no method" in DOCS.read_text()


def test_finding_16_the_2025_26_methods_on_routes():
    """16: polychromic and differential smoothing claimed at GRPO's validity; zero-success claimed without ever
    updating (its end policy is the base); SimKO, UCPO, ProRL, FlowRL not claimed; GRPO as in the first grid."""
    entry = _report("collapse_routes_new")["tasks"]["routes"]
    rows = entry["primary"]["rows"]
    assert entry["primary"]["family"] == 7
    claimed = sorted(n for n, r in rows.items() if r["claimed"])
    assert claimed == ["differential_smoothing", "polychromic", "zero_success"]
    assert rows["flowrl"]["separated"] and not rows["flowrl"]["claimed"] and rows["flowrl"]["mean"] > 0

    def long(name: str) -> dict:
        return entry["methods"][name]["by_class"]["test"]["long"]

    assert round(long("grpo")["lost_at"]["64"]["mean"], 1) == 44.5
    assert round(_report("collapse_routes")["tasks"]["routes"]["methods"]["grpo"]["by_class"]["test"]["long"][
        "lost_at"]["64"]["mean"], 6) == round(long("grpo")["lost_at"]["64"]["mean"], 6)  # fmt: skip
    assert [round(long(n)["lost_at"]["64"]["mean"], 1) for n in ("polychromic", "differential_smoothing")] == [2.8, 2.9]
    smoothing = long("differential_smoothing")  # "only from k = 64 up": 47.6 lost at k = 16, `long` validity 0.065
    assert round(smoothing["lost_at"]["16"]["mean"], 1) == 47.6
    assert round(smoothing["mu"]["mean"], 3) == 0.065 < entry["base_by_class"]["test"]["long"]["mu"]
    train = {n: entry["methods"][n]["splits"]["train"]["mu"]["mean"] for n in entry["methods"]}
    assert [round(train[n], 3) for n in ("grpo", "polychromic", "differential_smoothing")] == [0.979, 0.974, 0.976]
    short = entry["methods"]["polychromic"]["by_class"]["test"]["short"]["minority_share"]
    assert round(short["mean"], 3) == 0.497
    base = entry["base"]["train"]["mu"]
    zero = entry["methods"]["zero_success"]
    assert zero["splits"]["train"]["mu"]["mean"] == pytest.approx(base, abs=1e-12)  # "never update"
    assert [round(rows[n]["mean"], 1) for n in ("simko", "ucpo", "prorl", "flowrl")] == [-1.6, -3.4, 15.2, 11.0]


def test_finding_17_the_2025_26_methods_on_skewsum_and_carry():
    """17: the declared primaries (Δ effective answers at matched validity 0.9 on skewsum; Δ test problems lost at
    k = 128 on carry), Holm over the 7 methods of each task."""
    from collapse_bench.stats import holm

    tasks = _report("collapse_new")["tasks"]
    skew = {n: m for n, m in tasks["skewsum"]["methods"].items() if n != "grpo"}
    at = {n: next((lv for lv in m["levels"] if lv["mu"] == 0.9), None) for n, m in skew.items()}
    eff = {n: (lv["effective_answers"] if lv and lv["effective_answers"]["n"] else None) for n, lv in at.items()}
    kept = holm({n: (e or {}).get("p") for n, e in eff.items()})
    claimed = sorted(n for n, ok in kept.items() if ok and eff[n]["mean"] > 0)
    assert claimed == ["differential_smoothing", "polychromic", "simko", "ucpo"]
    assert eff["zero_success"] is None  # never reaches 0.9
    assert [round(eff[n]["mean"], 2) for n in ("polychromic", "differential_smoothing", "simko", "ucpo")] == [
        1.75, 0.68, 0.12, 0.09
    ]  # fmt: skip
    kl = at["polychromic"]["kl_pstar"]
    assert kl["separated"] and round(kl["mean"], 3) == 0.089  # "not more of p*"
    assert round(skew["polychromic"]["splits"]["train"]["effective_answers"]["mean"], 2) == 7.07
    assert round(tasks["skewsum"]["base"]["train"]["effective_answers"], 2) == 6.06
    assert round(skew["zero_success"]["splits"]["train"]["mu"]["mean"], 3) == 0.673
    carry = {n: m for n, m in tasks["carry"]["methods"].items() if n != "grpo"}
    lost = {n: m["paired_vs_baseline"]["test"]["lost_at_kmax"] for n, m in carry.items()}
    assert not any(holm({n: d["p"] for n, d in lost.items()}).values())
    assert not any(d["separated"] for d in lost.values())
    assert ["grpo", "ucpo"] in tasks["carry"]["identical_cells"]


def test_finding_16_the_80_20_rule_on_routes_is_not_claimed():
    entry = _report("collapse_routes_top_entropy")["tasks"]["routes"]
    row = entry["primary"]["rows"]["top_entropy_02"]
    assert entry["primary"]["family"] == 1 and not row["claimed"]
    assert [round(row["lo"], 1), round(row["hi"], 1)] == [-70.8, 70.1]


def _real_lm(name: str) -> dict:
    path = RESULTS / "real_lm" / name / "report.json"
    if not path.is_file():
        pytest.skip(f"{path} is not committed")
    return json.loads(path.read_text())


def _end_runs(name: str, arm: str) -> list[dict]:
    return [
        json.loads(p.read_text())
        for p in sorted((RESULTS / "real_lm" / name / "runs" / arm).glob("*/seed*/result.json"))
    ]


@pytest.mark.parametrize("name", ["between", "countries", "countries_gemma"])
def test_finding_15_real_lms_grpo_ends_below_the_base_and_no_declared_test_is_supported(name):
    """Finding 15 and docs/study/collapse_details.md "What transfers": stock GRPO ends with fewer effective answers than
    the base; the declared primary comparison is supported at no level; the shifted verifier's difference at
    matched validity 0.8 includes 0."""
    report = _real_lm(name)
    end = report["arms"]["grpo"]["end"]["train"]["effective_answers"]
    assert end["hi"] < report["base"]["train"]["effective_answers"]
    assert not any(level["supported"] for level in report["primary"]["levels"])
    at_08 = next(m for m in report["matched"]["alpha_dpg"] if m["mu"] == 0.8)["shifted_pass_kmax"]
    assert at_08["lo"] < 0 < at_08["hi"]


@pytest.mark.parametrize("name", ["countries", "countries_gemma"])
def test_finding_15_on_countries_every_seed_loses_held_out_pass_and_every_pair_is_nearer_p_star(name):
    """On `countries`, both models: GRPO's held-out pass@64 ends below the base's in every seed, and α-DPG's path is
    nearer p* than its GRPO partner's at validity 0.7 and 0.8 in every pair."""
    report = _real_lm(name)
    base = report["base"]["test"]["pass_at_kmax"]
    runs = _end_runs(name, "grpo")
    assert len(runs) >= 3 and all(r["splits"]["test"]["mean"]["pass_at"]["64"] < base for r in runs)
    # "by half a problem or more in 4 of 5 and 2 of 3 seeds" (32 test prompts)
    behind = sum((base - r["splits"]["test"]["mean"]["pass_at"]["64"]) * 32 >= 0.5 for r in runs)
    assert behind == {"countries": 4, "countries_gemma": 2}[name]
    primary = report["primary"]  # the declared comparison: α-DPG − GRPO in KL(p*‖π_v), each pair's difference
    assert (primary["arm"], primary["against"], primary["key"]) == ("alpha_dpg", "grpo", "kl_pstar")
    for level in primary["levels"]:
        if level["level"] in (0.7, 0.8):
            assert len(level["differences"]) >= 2 and all(d < 0 for d in level["differences"]), (name, level)


def test_finding_15_read_with_satterthwaite_df_between_would_survive_countries_would_not():
    """Finding 15's post-hoc reading: with Welch–Satterthwaite df, `between` at μ 0.8 (p 0.0014, family of 2) would
    survive Holm, SmolLM2 `countries` at 0.8 (p 0.021, family of 3) would not; both sign-flip p at their floors."""
    from collapse_bench.stats import holm, sign_flip_p

    finding = _finding(15)
    for name, p_text, family in (("between", "0.0014", 2), ("countries", "0.021", 3)):
        levels = _real_lm(name)["primary"]["levels"]
        assert len(levels) == family
        at_08 = next(lv for lv in levels if lv["level"] == 0.8)
        assert f"{at_08['p_satterthwaite']:.2g}" == p_text and f"has p {p_text}" in finding
        survives = holm({lv["level"]: lv.get("p_satterthwaite") for lv in levels})[0.8]
        assert survives == (name == "between") and not at_08["supported"]  # the declared verdict stays "no"
        assert sign_flip_p(at_08["differences"]) == 2 / 2 ** at_08["n"]
    assert "0.25 with 3 seeds and 0.0625 with 5" in finding
