"""rlvr_div.run_dir: an output_dir holding a run is refused unless the user resumes or overwrites; a resume cuts
metrics.jsonl and later checkpoints back to its checkpoint; overwrite deletes only what a run writes; recipe.yaml
keeps the history of starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlvr_div.errors import ConfigError
from rlvr_div.run_dir import apply_start, earlier_run, plan_start, truncate_metrics, write_resolved_recipe


def _checkpoint(out: Path, step: int, complete: bool = True) -> Path:
    path = out / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}) if complete else '{"global_st')
    return path


def _metrics(out: Path, steps: list[int], extra: list[str] = ()) -> None:
    lines = [json.dumps({"step": s, "loss": 0.1 * s}) for s in steps] + list(extra)
    (out / "metrics.jsonl").write_text("".join(x + "\n" for x in lines))


def _partial_run(out: Path) -> Path:
    out.mkdir(parents=True)
    (out / "recipe.yaml").write_text("script: {}\n")
    _checkpoint(out, 2)
    _checkpoint(out, 4)
    _checkpoint(out, 6, complete=False)  # killed while saving
    _metrics(out, [1, 2, 3, 4, 5, 6], extra=['{"step": 7, "lo'])  # torn by the kill
    return out


def test_a_directory_without_a_run_starts_new(tmp_path):
    assert plan_start(str(tmp_path / "missing"), None, False).action == "new"
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "rehearsal").mkdir()
    assert earlier_run(tmp_path) is None and plan_start(str(tmp_path), None, False).action == "new"


def test_a_run_is_refused_in_one_line_naming_both_choices(tmp_path):
    out = _partial_run(tmp_path / "run")
    with pytest.raises(ConfigError) as info:
        plan_start(str(out), None, False)
    message = str(info.value)
    assert "holds a partial run (last complete checkpoint: step 4)" in message and "\n" not in message
    assert "--resume_from_checkpoint true" in message and "--overwrite_output_dir true" in message
    (out / "trainer_state.json").write_text(json.dumps({"global_step": 6}))
    with pytest.raises(ConfigError, match="holds a finished run \\(6 steps\\)"):
        plan_start(str(out), "false", False)
    with pytest.raises(ConfigError, match="both set: choose one"):
        plan_start(str(out), "true", True)
    with pytest.raises(ConfigError, match="is not a directory"):
        plan_start(str(out), str(out / "checkpoint-9"), False)


def test_resume_cuts_the_run_back_to_its_last_complete_checkpoint(tmp_path):
    out = _partial_run(tmp_path / "run")
    start = apply_start(str(out), plan_start(str(out), "true", False))
    assert (start.action, start.step) == ("resume", 4) and start.checkpoint == str(out / "checkpoint-4")
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    assert start.metrics_lines_dropped == 3  # steps 5 and 6, and the torn line
    assert start.removed == ["checkpoint-6"] and not (out / "checkpoint-6").exists()
    assert (out / "checkpoint-2").exists() and (out / "checkpoint-4").exists()


def test_resume_from_an_earlier_checkpoint_deletes_the_later_ones(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    for step in (2, 4, 6):
        _checkpoint(out, step)
    _metrics(out, [1, 2, 3, 4, 5, 6], extra=[json.dumps({"step": 6, "train_runtime": 1.0})])
    (out / "trainer_state.json").write_text(json.dumps({"global_step": 6}))  # it had finished
    start = apply_start(str(out), plan_start(str(out), str(out / "checkpoint-2"), False))
    assert start.step == 2 and sorted(start.removed) == ["checkpoint-4", "checkpoint-6", "trainer_state.json"]
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert earlier_run(out).describe() == "a partial run (last complete checkpoint: step 2)"


def test_resume_without_a_checkpoint_starts_at_step_zero(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    _metrics(out, [1, 2])
    start = apply_start(str(out), plan_start(str(out), "true", False))
    assert (start.action, start.checkpoint, start.step) == ("resume", None, 0)
    assert (out / "metrics.jsonl").read_text() == ""


def test_overwrite_deletes_what_a_run_writes_and_nothing_else(tmp_path):
    out = _partial_run(tmp_path / "run")
    for name in ("model.safetensors", "config.json", "tokenizer.json", "adapter_config.json"):
        (out / name).write_text("x")
    (out / "trainer_state.json").write_text(json.dumps({"global_step": 6}))
    (out / "runs").mkdir()  # TensorBoard's default log directory
    (out / "notes.txt").write_text("mine")
    (out / "rehearsal").mkdir()
    start = apply_start(str(out), plan_start(str(out), None, True))
    assert start.action == "overwrite" and start.earlier == "a finished run (6 steps)"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "rehearsal"]
    assert {"checkpoint-2", "checkpoint-6", "metrics.jsonl", "recipe.yaml", "runs"} <= set(start.removed)


def test_truncate_metrics_keeps_each_step_once(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert truncate_metrics(path, 3) == 0 and not path.exists()
    _metrics(tmp_path, [1, 2, 3, 4], extra=["not json", json.dumps({"step": 3, "train_runtime": 2.0})])
    assert truncate_metrics(path, 3) == 3
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3]


def test_recipe_history_records_each_start_and_what_changed(tmp_path):
    out = tmp_path / "run"
    resolved = {"script": {"task": "arith"}, "training": {"max_steps": 4, "resume_from_checkpoint": None}}
    write_resolved_recipe(str(out), resolved, plan_start(str(out), None, False))
    _checkpoint(out, 4)
    again = {"script": {"task": "arith"}, "training": {"max_steps": 8, "resume_from_checkpoint": "true"}}
    write_resolved_recipe(str(out), again, apply_start(str(out), plan_start(str(out), "true", False)))
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    assert recipe["training"]["max_steps"] == 8
    first, resumed = recipe["history"]
    assert first["action"] == "new" and first["cwd"]
    assert resumed["action"] == "resume" and resumed["step"] == 4
    assert resumed["changed"] == {"training.max_steps": [4, 8]}  # how a run is started is not a change


def _failed_start(out: Path, resolved: dict, metrics: list[int] = ()) -> Path:
    """What a run that fails before its first checkpoint leaves: recipe.yaml (written after the model loads), maybe
    metrics.jsonl."""
    write_resolved_recipe(str(out), resolved, plan_start(str(out), None, False, resolved))
    if metrics:
        _metrics(out, list(metrics))
    return out


_RESOLVED = {
    "script": {"task": "arith", "overwrite_output_dir": False},
    "training": {"max_steps": 4, "resume_from_checkpoint": None, "model_init_kwargs": None},
    "model": {"model_revision": "main", "dtype": "float32"},
    "launch": {"processes": 1},
}


def _as_written(resolved: dict) -> dict:
    """``resolved`` as train.py writes it after the trainer is built: model_init_kwargs filled from the model keys."""
    filled = {"revision": "main", "trust_remote_code": False, "attn_implementation": None, "dtype": "float32"}
    training = {**resolved["training"], "model_init_kwargs": filled}
    return {**resolved, "training": training}


def test_a_failed_start_of_the_same_recipe_starts_again(tmp_path):
    out = _failed_start(tmp_path / "run", _as_written(_RESOLVED), metrics=[1, 2])
    assert earlier_run(out).describe() == "a run that stopped before its first checkpoint"
    start = plan_start(str(out), None, False, _RESOLVED)  # the same command again
    assert (start.action, start.checkpoint, start.step) == ("restart", None, 0)
    apply_start(str(out), start)
    assert start.metrics_lines_dropped == 2 and (out / "metrics.jsonl").read_text() == ""
    write_resolved_recipe(str(out), _as_written(_RESOLVED), start)
    first, again = yaml.safe_load((out / "recipe.yaml").read_text())["history"]
    assert first["action"] == "new" and again["action"] == "restart" and "changed" not in again
    assert again["earlier"] == "a run that stopped before its first checkpoint" and again["metrics_lines_dropped"] == 2
    # how a run is started is not a change of recipe
    started = {**_RESOLVED, "training": {**_RESOLVED["training"], "resume_from_checkpoint": "false"}}
    assert plan_start(str(out), "false", False, started).action == "restart"


def test_a_failed_start_of_another_recipe_or_a_run_with_progress_is_refused(tmp_path):
    out = _failed_start(tmp_path / "run", _as_written(_RESOLVED))
    other = {**_RESOLVED, "training": {**_RESOLVED["training"], "max_steps": 8}}
    with pytest.raises(ConfigError) as info:
        plan_start(str(out), None, False, other)
    message = str(info.value)
    assert "holds a run that stopped before its first checkpoint with another recipe (differs in max_steps)" in message
    assert "--resume_from_checkpoint true" in message and "\n" not in message
    with pytest.raises(ConfigError, match="holds a run that stopped before its first checkpoint:"):
        plan_start(str(out), None, False)  # no recipe to compare with: refused as before
    # real progress: a checkpoint (complete or not), a final state or a saved model keeps the refusal
    for progress in ("checkpoint", "torn checkpoint", "final", "model"):
        run = _failed_start(tmp_path / progress.replace(" ", "_"), _as_written(_RESOLVED), metrics=[1])
        if progress == "checkpoint":
            _checkpoint(run, 1)
        elif progress == "torn checkpoint":
            _checkpoint(run, 1, complete=False)
        elif progress == "final":
            (run / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
        else:
            (run / "model.safetensors").write_text("x")
        with pytest.raises(ConfigError, match="holds a (partial|finished) run"):
            plan_start(str(run), None, False, _RESOLVED)
    # an unreadable recipe.yaml is not taken for the same recipe
    (out / "recipe.yaml").write_text("{not yaml")
    with pytest.raises(ConfigError, match="holds a run that stopped before its first checkpoint:"):
        plan_start(str(out), None, False, _RESOLVED)
