"""The runs a real-math study expands to, in the order they train, and each run's ``rlvr-div train`` arguments and
identity (:mod:`collapse_bench.real_math_spec` is the config, :mod:`collapse_bench.real_math_runs` runs them)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from collapse_bench.real_math_spec import INDICES_OPTION, RUN_DEFAULTS, Arm, Study, StudyRun
from collapse_bench.spec import recipe_argv
from rlvr_div.errors import ConfigError


def study_runs(study: Study, arms: list[str] | None = None, seeds: list[int] | None = None) -> list[StudyRun]:
    """The runs in the order they train: every arm of seed s (in the config's order) before seed s + 1, each arm on
    its own seeds; ``arms``/``seeds`` keep only those (a name or seed the study lacks is one line)."""
    names = [a.name for a in study.arms]
    for name in arms or []:
        if name not in names:
            raise ConfigError(f"--arms names {name!r}, not an arm of the study ({', '.join(names)})")
    for seed in seeds or []:
        if seed not in study.seeds:
            raise ConfigError(f"--seeds names {seed}, not a seed of the study {list(study.seeds)}")
    runs = [StudyRun(a.name, s) for s in study.seeds if seeds is None or s in seeds for a in study.arms
            if (arms is None or a.name in arms) and s in a.seeds]  # fmt: skip
    if not runs:
        raise ConfigError("no run of the study has one of those arms with one of those seeds")
    return runs


def run_settings(study: Study, arm: Arm, seed: int, output_dir: str | os.PathLike, indices: list[int] | None,
                 rehearsal_path: str | os.PathLike | None, resolve_model: bool = True) -> dict[str, Any]:  # fmt: skip
    """The ``rlvr-div train`` settings of a run, later keys winning: :data:`RUN_DEFAULTS`, the study's common
    settings, the arm's overrides, then the run's own (model, task and its filtered pool, seed, output directory,
    a checkpoint every ``path_every`` steps, all of them kept, and the ``verifier`` settings as the task's reward's
    ``reward_kwargs``). The model is a ``package:`` reference resolved to its installed directory, or with
    ``resolve_model=False`` the config's own text (what a run is, needing no package installed)."""
    from rlvr_div.models.gguf_packages import package_reference

    model = package_reference(study.model) if resolve_model else study.model
    options = dict(study.task_options) | ({INDICES_OPTION: list(indices)} if indices is not None else {})
    settings: dict[str, Any] = {**RUN_DEFAULTS, **study.common, **arm.overrides}
    settings |= {"model_name_or_path": model, "task": study.task,
                 "task_split": study.train_split, "task_options": json.dumps(options), "seed": seed,
                 "output_dir": str(output_dir), "save_strategy": "steps", "save_steps": study.eval.path_every,
                 "save_total_limit": study.max_steps // study.eval.path_every + 2}  # fmt: skip
    if study.gguf_file:
        settings["gguf_file"] = study.gguf_file
    if study.threads is not None:
        settings["threads"] = study.threads
    if arm.rehearsal:
        settings["rehearsal_path"] = str(rehearsal_path)
    if study.verifier:
        settings["reward_kwargs"] = json.dumps({study.reward: study.verifier})
    return settings


def train_argv(study: Study, arm: Arm, seed: int, output_dir: str | os.PathLike, indices: list[int] | None,
               rehearsal_path: str | os.PathLike | None, resume: bool,
               resolve_model: bool = True) -> list[str]:  # fmt: skip
    """``rlvr-div train`` arguments of a run (:func:`collapse_bench.spec.recipe_argv`), with
    ``--resume_from_checkpoint=true`` when ``resume`` (``resolve_model``: as :func:`run_settings`)."""
    settings = run_settings(study, arm, seed, output_dir, indices, rehearsal_path, resolve_model)
    argv = recipe_argv(arm.recipe, settings)
    return [*argv, "--resume_from_checkpoint=true"] if resume else argv


def run_identity(study: Study, arm: Arm, seed: int, indices: list[int] | None) -> str:
    """What a run's training must still be to be continued or reused: its arguments with the output paths as
    placeholders, the model as the config names it and the recipe relative to the config (a moved checkout or
    environment matches), without ``threads``, and the recipe file's content."""
    argv = train_argv(study, arm, seed, "<run>", indices, "<rehearsal>", resume=False, resolve_model=False)
    argv = [a for a in argv if not a.startswith("--threads=")]  # how fast, not what it trains
    argv[1] = os.path.relpath(argv[1], study.root)
    text = json.dumps({"argv": argv, "recipe": Path(arm.recipe).read_text()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
