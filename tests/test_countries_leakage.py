"""collapse_bench.countries_leakage: `countries`' held-out prefixes a training prefix answers, and the real-LM
studies' held-out numbers on the prefixes none does (recomputed from the committed per-prompt numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from collapse_bench.countries_leakage import (
    REAL_LM,
    leakage,
    leakage_summary,
    load_study,
    main,
    measure,
    measure_study,
    pass_at,
    prefix_of,
    subset_metrics,
)
from collapse_bench.markdown import pm
from rlvr_div.tasks.countries import countries_prompt

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = REAL_LM / "countries_leakage" / "report.json"


def _committed() -> dict:
    if not (REAL_LM / "countries" / "base.json").is_file() or not COMMITTED.is_file():
        pytest.skip("the real-LM studies are not committed")
    return json.loads(COMMITTED.read_text())


def _flat(tree: dict, path: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{path}/{key}") if isinstance(value, dict) else {f"{path}/{key}": value})
    return out


def test_leakage_counts_names_a_training_prefix_answers():
    assert prefix_of(countries_prompt("Al")) == "Al"
    out = leakage(["Al", "Ma", "Z", "K"], ["A", "Mal", "Ke"])
    assert out["Al"] == 1.0  # Albania, Algeria: both answer "A"
    assert out["Ma"] == 5 / 10  # Malawi, Malaysia, Maldives, Mali, Malta answer "Mal"; Madagascar, Mauritius ... not
    assert out["K"] == 1 / 5 and out["Z"] == 0.0  # only Kenya answers "Ke"; nothing Z is trained
    s = leakage_summary(["Z", "Al", "Ma", "K"], ["A", "Mal", "Ke"])
    assert s["covered_outright"] == ["Al"] and s["clean"] == ["Z"]  # in the test order
    assert s["mean_leakage"] == pytest.approx((0 + 1 + 0.5 + 0.2) / 4)
    assert leakage_summary(["Z"], [])["clean"] == ["Z"] and leakage(["Z"], ["Z"])["Z"] == 1.0


def test_subset_metrics_reads_only_the_kept_prompts():
    per_prompt = {"mu": [0.5, 0.0, 1.0], "effective_answers": [2.0, 4.0, 100.0], "kl_pstar": [0.1, 0.3, 50.0]}
    m = subset_metrics(per_prompt, [0.5, 0.5, 0.0], keep=[0, 1], ks=(1, 2))
    assert m["pass_at"] == {"1": pytest.approx(0.25), "2": pytest.approx(0.375)}
    assert m["effective_answers"] == pytest.approx(3.0) and m["kl_pstar"] == pytest.approx(0.2)
    # lost@k = Σ b(1 − m), gained@k = Σ (1 − b)m with b, m the base's and the run's pass@k
    assert m["lost_at"]["1"] == pytest.approx(0.5 * 0.5 + 0.5 * 1.0) and m["gained_at"]["1"] == pytest.approx(0.25)
    assert m["lost_at"]["2"] == pytest.approx(0.75 * 0.25 + 0.75) and m["gained_at"]["2"] == pytest.approx(0.1875)
    for k in ("1", "2"):
        assert m["vs_base"][k] == pytest.approx(m["gained_at"][k] - m["lost_at"][k])
    assert pass_at(np.array([0.0, 0.5, 1.0]), 2) == pytest.approx([0.0, 0.75, 1.0])


def _write(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_a_synthetic_study_on_its_clean_subset(tmp_path):
    test, train = ["Al", "Z", "K"], ["A", "Mal"]  # "Al" covered by "A"; "Z" and "K" clean

    def per(mu):
        return {"mu": mu, "effective_answers": [1.0, 2.0, 3.0], "kl_pstar": [0.0, 0.5, 1.0]}

    base = {"prompts": [countries_prompt(p) for p in test], "summary": {"per_prompt": per([0.9, 0.5, 0.5])}}
    _write(
        tmp_path / "base.json", {"splits": {"train": {"prompts": [countries_prompt(p) for p in train]}, "test": base}}
    )
    runs = {("grpo", 1): [1.0, 0.0, 0.5], ("grpo", 2): [1.0, 0.25, 0.5], ("grpo", 3): [1.0, 0.5, 0.5],
            ("alpha_dpg", 1): [0.0, 0.5, 0.5], ("alpha_dpg", 2): [0.0, 0.5, 1.0]}  # fmt: skip
    for (arm, seed), mu in runs.items():
        _write(tmp_path / "runs" / arm / "none" / f"seed{seed}" / "result.json",
               {"splits": {"test": {"per_prompt": per(mu), "mean": {}}}})  # fmt: skip
    splits, loaded = load_study(tmp_path)
    assert sorted(loaded) == ["alpha_dpg", "grpo"] and sorted(loaded["grpo"]) == [1, 2, 3]
    s = measure_study(tmp_path)
    assert s["covered_outright"] == ["Al"] and s["clean"] == ["Z", "K"]
    c = s["clean_subset"]
    assert c["prompts"] == 2 and c["base"]["pass_at"]["1"] == pytest.approx(0.5)  # "Al" (0.9) is left out
    grpo = c["arms"]["grpo"]
    assert [r["pass_at"]["1"] for r in grpo["per_seed"].values()] == pytest.approx([0.25, 0.375, 0.5])
    assert [r["vs_base"]["1"] for r in grpo["per_seed"].values()] == pytest.approx([-0.5, -0.25, 0.0])
    assert grpo["pass_at"]["1"]["mean"] == pytest.approx(0.375) and grpo["seeds_half_a_problem_below"]["1"] == 1
    assert grpo["sign_flip_p"]["1"] == pytest.approx(4 / 8)  # −0.5, −0.25, 0: 4 of the 8 sign vectors reach |Σ|
    assert grpo["effective_answers_vs_base"]["mean"] == 0.0 and grpo["versus_grpo"] == {}
    d = c["arms"]["alpha_dpg"]["versus_grpo"]["pass_at_64"]  # paired on seeds 1 and 2 only
    assert d["seeds"] == [1, 2] and d["mean"] == pytest.approx((0.5 + 0.0) / 2, abs=1e-6)  # seed 1: "Z" 0 vs 1
    assert s["all"]["arms"]["grpo"]["pass_at"]["1"]["mean"] == pytest.approx(np.mean([1.5 / 3, 1.75 / 3, 2.0 / 3]))


def test_the_issues_numbers_and_the_committed_report():
    committed = _committed()
    m = json.loads(json.dumps(measure()))
    t = m["task_split"]  # the issue's numbers: the task's 33 test prefixes against its 33 training prefixes
    assert (t["test_prefixes"], round(t["mean_leakage"], 2), len(t["covered_outright"]), len(t["clean"])) == (
        33, 0.47, 13, 15)  # fmt: skip
    assert set(m["studies"]) >= {"countries", "countries_gemma", "countries_shaping", "countries_lora_r4"}
    for name, s in m["studies"].items():  # the studies measure 32 of each split ("S" and "R" left out)
        assert (s["test_prefixes"], round(s["mean_leakage"], 3), len(s["covered_outright"])) == (32, 0.466, 13), name
        assert sorted(s["clean"]) == sorted(t["clean"]), name
    assert m["studies"].keys() == committed["studies"].keys()
    for name, s in m["studies"].items():
        for arm, r in s["clean_subset"]["arms"].items():
            got, want = r["per_seed"], committed["studies"][name]["clean_subset"]["arms"][arm]["per_seed"]
            assert _flat(got) == pytest.approx(_flat(want)), (name, arm)


def test_all_prompts_reproduce_each_runs_committed_means():
    _committed()
    for study in sorted(REAL_LM.glob("countries*")):
        if not (study / "base.json").is_file():
            continue
        _, runs = load_study(study)
        s = measure_study(study)["all"]
        for arm, seeds in runs.items():
            for seed, pp in seeds.items():
                got, want = s["arms"][arm]["per_seed"][str(seed)], pp["committed"]
                for k in ("1", "4", "16", "64"):
                    assert got["pass_at"][k] == pytest.approx(want["pass_at"][k], abs=1e-9)
                    assert got["lost_at"][k] == pytest.approx(want["lost_at"][k], abs=1e-9)
                    assert got["gained_at"][k] == pytest.approx(want["gained_at"][k], abs=1e-9)
                assert got["effective_answers"] == pytest.approx(want["effective_answers"], abs=1e-9)
                assert got["kl_pstar"] == pytest.approx(want["kl_pstar"], abs=1e-9)


def test_the_reported_numbers_on_the_clean_subset():
    c = _committed()["studies"]
    smol, gemma = c["countries"]["clean_subset"], c["countries_gemma"]["clean_subset"]
    g = smol["arms"]["grpo"]
    assert [round(r["vs_base"]["64"], 2) for r in g["per_seed"].values()] == [-2.91, -2.73, -2.97, -3.74, -2.45]
    assert g["seeds_half_a_problem_below"]["64"] == 5 and g["sign_flip_p"]["64"] == 2 / 2**5
    assert round(smol["base"]["pass_at"]["64"], 3) == 0.776 and round(g["pass_at"]["64"]["mean"], 3) == 0.579
    assert round(g["lost_at"]["64"]["mean"], 2) == 3.91 and round(g["gained_at"]["64"]["mean"], 2) == 0.95
    e = g["effective_answers_vs_base"]
    assert (round(smol["base"]["effective_answers"], 2), round(g["effective_answers"]["mean"], 2)) == (1.80, 1.61)
    assert e["seeds_below"] == 4 and e["sign_flip_p"] == 4 / 2**5
    a = smol["arms"]["alpha_dpg"]["versus_grpo"]
    assert round(a["pass_at_64"]["mean"], 3) == 0.190 and a["pass_at_64"]["sign_flip_p"] == 2 / 2**5
    assert round(a["kl_pstar"]["mean"], 2) == -0.32 and a["kl_pstar"]["sign_flip_p"] == 2 / 2**5
    gg = gemma["arms"]["grpo"]
    assert [round(r["vs_base"]["64"], 2) for r in gg["per_seed"].values()] == [-0.78, -0.28, -1.72]
    assert gg["seeds_half_a_problem_below"]["64"] == 2
    assert (round(gemma["base"]["pass_at"]["64"], 3), round(gg["pass_at"]["64"]["mean"], 3)) == (0.893, 0.831)
    assert (round(gemma["base"]["effective_answers"], 2), round(gg["effective_answers"]["mean"], 2)) == (2.18, 1.57)
    assert gg["effective_answers_vs_base"]["seeds_below"] == 3
    every = c["countries"]["all"]  # all 32 measured test prefixes, for comparison
    assert (round(every["base"]["effective_answers"], 2), pm(every["arms"]["grpo"]["effective_answers"], 2)) == (
        2.08, "1.59 ± 0.14")  # fmt: skip
    assert every["arms"]["grpo"]["effective_answers_vs_base"]["seeds_below"] == 5
    lora = [round(c[f"countries_lora_{v}"]["clean_subset"]["arms"]["grpo"]["vs_base"]["64"]["mean"], 2)
            for v in ("all", "r4", "r64", "lr1e-4")]  # fmt: skip
    assert lora == [-5.09, -2.22, -1.08, 1.17]
    docs = " ".join((ROOT / "docs" / "study" / "collapse.md").read_text().split())
    command = "python -m collapse_bench.countries_leakage --out bench/results/real_lm/countries_leakage"
    for text in ("2.45 to 3.74 of the 15 clean held-out problems at k = 64 in all 5 seeds", "0.776 → 0.579 ± 0.040",
                 "1.80 → 1.61 ± 0.17", "lower in 4 of 5 seeds", "2.08 → 1.59 ± 0.14, 5 of 5", "2.18 → 1.57 ± 0.03",
                 "+0.190 ± 0.043", command):  # fmt: skip
        assert text in docs, text


def test_the_command_writes_its_report(tmp_path):
    _committed()
    assert main(["--out", str(tmp_path)]) == 0
    assert "python -m collapse_bench.countries_leakage --out" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "report.md").read_text() == (REAL_LM / "countries_leakage" / "report.md").read_text()
