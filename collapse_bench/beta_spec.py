"""The β study's configuration (``bench/beta.yaml``, ``bench/real_lm.yaml``): arms, β values, seeds, the convergence
rule, and the runs they expand to; every problem is one :class:`ConfigError` line before anything runs.

Running the study is :mod:`collapse_bench.beta_study`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from math import gcd, inf
from pathlib import Path
from typing import Any

from collapse_bench.measure import PER_PROMPT_PATH_KEYS
from collapse_bench.spec import RESERVED, a_number, checked_mapping, int_at_least, number_list, recipe_file
from rlvr_div.errors import ConfigError
from rlvr_div.recipe import read_yaml_mapping

SPLITS = ("train", "test")
KINDS = ("sampled", "exact", "anneal", "point")
DTYPES = ("float32", "float64")
ANNEAL_ONLY = ("final_learning_rate", "dtype", "perturbation")  # the anneal arm's own settings
TOP_KEYS = {"model", "gguf_file", "task", "task_options", "prompts", "samples", "measure_batch_size", "seeds",
            "workers", "threads", "betas", "common", "ks", "path_every", "convergence", "arms",
            "reached_kl", "path_dense", "path_per_prompt", "primary", "checkpoint_every", "measure_shared_prefix",
            "extends"}  # fmt: skip
ARM_KEYS = {"name", "label", "kind", "recipe", "key", "overrides", "learning_rate", "max_steps", "betas", "seeds",
            "final_learning_rate", "dtype", "perturbation"}  # fmt: skip
CONVERGENCE_KEYS = {"window", "tolerance", "min_steps", "stop_at_mu"}
PATH_DENSE_KEYS = {"above_mu", "every"}
PRIMARY_KEYS = {"arm", "against", "key", "levels", "direction", "resamples"}
PRIMARY_DIRECTIONS = ("negative", "positive")


@dataclass(frozen=True)
class Convergence:
    """A run has plateaued at step s (s ≥ ``min_steps``) when, for validity μ and the effective number of valid
    answers alike, the mean over the path points in the last ``window``·s steps differs from the mean over the
    ``window``·s steps before by less than ``tolerance`` (relative). With ``stop_at_mu``, a sampled run or point
    also stops at the first path point whose validity μ on the measured training prompts is at least that value
    (the real-LM study's budget: "until validity passes 0.9")."""

    window: float = 0.2
    tolerance: float = 0.01
    min_steps: int = 200
    stop_at_mu: float | None = None


@dataclass(frozen=True)
class Arm:
    name: str
    label: str
    kind: str  # sampled | exact | anneal | point
    recipe: str | None = None  # sampled and point arms
    key: str | None = None  # the recipe key that β sets (sampled arms)
    overrides: dict[str, Any] = field(default_factory=dict)
    learning_rate: float | None = None  # exact and anneal arms: Adam's (peak) learning rate (default: the common one)
    max_steps: int | None = None  # exact arm; anneal arm: the steps at each β (default: the common one)
    betas: tuple[float, ...] | None = None  # this arm's β values (default: the study's)
    # anneal arm only (None elsewhere, and then not part of a run's identity)
    final_learning_rate: float | None = None  # the cosine decay's end at each β
    dtype: str | None = None  # float32 | float64: the policy's parameters
    perturbation: float | None = None  # start: base weights + perturbation·rms(w)·N(0, 1), per tensor, from the seed
    # the study's seeds this arm runs (default: all of them); never part of a run's identity (a run has its own seed)
    seeds: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PathDense:
    """Denser path points near the top: once the last point's validity μ exceeds ``above_mu``, a point every
    ``every`` steps (besides every ``path_every``-th), so matched validity at 0.9 and 0.95 is read inside a short
    segment, not across a jump."""

    above_mu: float
    every: int


@dataclass(frozen=True)
class Primary:
    """The primary comparison, declared in the config before the runs: ``arm`` minus ``against`` in the path number
    ``key`` on the measured training prompts at each validity in ``levels`` (matched along both paths, paired by
    seed); ``direction`` is the sign that would support the claim; Holm over the levels; the interval includes prompt
    sampling (``resamples`` bootstrap draws of the prompts, :func:`collapse_bench.per_prompt.matched_with_prompts`)."""

    arm: str
    against: str
    key: str
    levels: tuple[float, ...]
    direction: str
    resamples: int = 2000


@dataclass(frozen=True)
class Study:
    model: str
    task: str
    task_options: dict[str, Any]
    seeds: tuple[int, ...]
    workers: int
    threads: int
    betas: tuple[float, ...]
    common: dict[str, Any]
    ks: tuple[int, ...]
    path_every: int
    convergence: Convergence
    arms: tuple[Arm, ...]
    root: str
    gguf_file: str | None = None  # the model is this GGUF file in the ``model`` directory
    prompts: dict[str, int] = field(default_factory=dict)  # split -> the first n prompts measured (default: all)
    samples: int = 0  # samples per measured prompt at the end: sampled validity and non-canonical mass (0: none)
    measure_batch_size: int = 512  # sequences per teacher-forced forward (smaller for a large vocabulary)
    reached_kl: float = 0.01  # the report calls a sampling-free run's β reached where KL(π̄‖p̄_β) ends below this (nats)

    # once the last path point's validity exceeds ``above_mu``, a point every ``every`` steps as well (None: never)
    path_dense: PathDense | None = None
    path_per_prompt: bool = False  # path points also carry each measured prompt's μ, KL(p*‖π_v), effective answers
    primary: Primary | None = None  # the study's primary comparison, written before its runs
    # a sampled run or point keeps its last checkpoint every this many steps and resumes from it after a kill
    # (:mod:`collapse_bench.run_progress`; None: an unfinished run starts over); not part of a run's identity
    checkpoint_every: int | None = None
    # the exact measurements of the trained policy (the paths of sampled arms and points, every arm's end) share each
    # prompt's forward among its valid answers: the same log-probs up to float round-off
    # (rlvr_div.logprobs.prefix_shared_logprobs); not part of a run's identity
    measure_shared_prefix: bool = False

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


@dataclass(frozen=True)
class StudyRun:
    arm: str
    beta: float | None  # None: a point (no β)
    seed: int

    @property
    def key(self) -> str:
        return f"{self.arm}/{'none' if self.beta is None else f'{self.beta:g}'}/seed{self.seed}"


def _anneal_settings(name: str, kind: str, a: dict[str, Any], betas: list[float]) -> dict[str, Any]:
    """The anneal arm's own keys, checked (refused on any other kind)."""
    own = {k: a[k] for k in ANNEAL_ONLY if k in a}
    if kind != "anneal":
        if own:
            raise ConfigError(f"arm {name!r}: {next(iter(own))!r} is an anneal arm's key, not a {kind} arm's")
        return {}
    if list(betas) != sorted(betas, reverse=True) or len(set(betas)) != len(betas):
        raise ConfigError(f"arm {name!r}: an anneal arm warm-starts each β from the one before, so its betas must "
                          f"strictly decrease, got {list(betas)}")  # fmt: skip
    dtype = own.get("dtype", "float32")
    if dtype not in DTYPES:
        raise ConfigError(f"arm {name!r}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    final = own.get("final_learning_rate")
    if final is not None:
        final = a_number(final, f"arm {name!r}: final_learning_rate", "a positive number", lambda v: v <= 0)
    perturbation = own.get("perturbation", 0.0)
    perturbation = a_number(perturbation, f"arm {name!r}: perturbation", "a number >= 0", lambda v: v < 0)
    return {"final_learning_rate": final, "dtype": dtype, "perturbation": perturbation}


def read_study_config(path: Path) -> dict[str, Any]:
    """The config's mapping; with ``extends: OTHER.yaml`` (a file beside it), OTHER's mapping with this file's keys
    put over it (``common`` key by key, every other key whole; ``key: null`` drops OTHER's). Recipes are read
    relative to this file's directory; OTHER may not extend a third file."""
    raw = checked_mapping(read_yaml_mapping(path, "beta study config"), f"beta study config {str(path)!r}", TOP_KEYS)
    if "extends" not in raw:
        return raw
    other = raw["extends"]
    if not isinstance(other, str) or Path(other).name != other:
        raise ConfigError(f"extends must name a YAML file beside {path.name}, got {other!r}")
    base = checked_mapping(read_yaml_mapping(path.parent / other, "beta study config"),
                           f"beta study config {other!r}", TOP_KEYS)  # fmt: skip
    if "extends" in base:
        raise ConfigError(f"{other} extends {base['extends']!r} itself; a config may extend one that extends none")
    common = checked_mapping(raw.get("common", {}), "common")
    merged = {**base, **{k: v for k, v in raw.items() if k not in ("extends", "common")}}
    merged["common"] = {**(base.get("common") or {}), **common}
    return {k: v for k, v in merged.items() if v is not None}


def load_study(path: str | Path) -> Study:
    """Read and check a β-study YAML file (:func:`read_study_config`), one line per problem, before anything runs."""
    path = Path(path)
    raw = read_study_config(path)
    root = path.resolve().parent
    seeds = raw.get("seeds", [1, 2, 3])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds) or len(set(seeds)) != len(
            seeds):  # fmt: skip
        raise ConfigError(f"seeds must be a non-empty list of distinct integers, got {seeds!r}")
    betas = raw.get("betas")
    if not number_list(betas, lambda b: b > 0):
        raise ConfigError(f"betas must be a non-empty list of positive numbers, got {betas!r}")
    common = checked_mapping(raw.get("common") or {}, "common")
    bad = sorted(set(common) & RESERVED)
    if bad:
        raise ConfigError(f"common sets {bad[0]!r}, which the study sets for each run")
    int_at_least(common.get("max_steps"), "common.max_steps", 1)
    conv = checked_mapping(raw.get("convergence") or {}, "convergence", CONVERGENCE_KEYS)
    for key, value in conv.items():
        a_number(value, f"convergence.{key}", "a number", lambda v: False)
    convergence = Convergence(**conv)
    if not 0 < convergence.window <= 0.5 or not convergence.tolerance > 0 or convergence.min_steps < 0:
        raise ConfigError(f"convergence needs 0 < window <= 0.5, tolerance > 0 and min_steps >= 0, got {conv}")
    if convergence.stop_at_mu is not None and not 0 < convergence.stop_at_mu <= 1:
        raise ConfigError(f"convergence.stop_at_mu must be in (0, 1], got {convergence.stop_at_mu!r}")
    prompts = raw.get("prompts") or {}
    if not isinstance(prompts, dict) or set(prompts) - set(SPLITS):
        raise ConfigError(f"prompts must map splits ({', '.join(SPLITS)}) to counts, got {prompts!r}")
    for split, n in prompts.items():
        int_at_least(n, f"prompts.{split}", 1)
    samples = raw.get("samples", 0)
    if samples != 0:
        int_at_least(samples, "samples", 1)
    arms = []
    for i, a in enumerate(raw.get("arms") or []):
        a = checked_mapping(a, f"arms[{i}]", ARM_KEYS)
        name = a.get("name")
        if not isinstance(name, str) or not name.replace("_", "").isalnum():
            raise ConfigError(f"arms[{i}] needs a `name` of letters, digits or '_', got {name!r}")
        kind = a.get("kind", "sampled")
        if kind not in KINDS:
            raise ConfigError(f"arm {name!r}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        recipe = None if kind in ("exact", "anneal") else recipe_file(root, a.get("recipe"), f"arm {name!r}")
        if kind == "sampled" and not isinstance(a.get("key"), str):
            raise ConfigError(f"arm {name!r}: a sampled arm needs `key`, the recipe key that β sets")
        overrides = a.get("overrides") or {}
        if set(overrides) & RESERVED:
            raise ConfigError(f"arm {name!r} overrides {sorted(set(overrides) & RESERVED)[0]!r}, set by the study")
        own = a.get("betas")
        if own is not None and not number_list(own, lambda b: b > 0):
            raise ConfigError(f"arm {name!r}: betas must be a non-empty list of positive numbers, got {own!r}")
        anneal = _anneal_settings(name, kind, a, own or betas)
        arm_seeds = a.get("seeds")
        if arm_seeds is not None:
            if kind == "exact":
                raise ConfigError(f"arm {name!r}: the exact arm runs once per β (no random stream); remove its seeds")
            if (
                not isinstance(arm_seeds, list)
                or not arm_seeds
                or len(set(arm_seeds)) != len(arm_seeds)
                or not all(isinstance(x, int) and not isinstance(x, bool) and x in seeds for x in arm_seeds)
            ):
                raise ConfigError(f"arm {name!r}: seeds must be a non-empty list of distinct seeds of the study's "
                                  f"{seeds}, got {arm_seeds!r}")  # fmt: skip
            arm_seeds = tuple(x for x in seeds if x in arm_seeds)  # the study's order
        arms.append(Arm(name, str(a.get("label", name)), kind, recipe, a.get("key"), dict(overrides),
                        a.get("learning_rate"), a.get("max_steps"),
                        None if own is None else tuple(float(b) for b in own), **anneal,
                        seeds=arm_seeds))  # fmt: skip
    if not arms or len({a.name for a in arms}) != len(arms):
        raise ConfigError("arms must be a non-empty list with distinct names")
    ks = tuple(int(k) for k in raw.get("ks", [1, 2, 4, 8, 16, 32, 64, 128]))
    path_dense = None
    if raw.get("path_dense") is not None:
        dense = checked_mapping(raw["path_dense"], "path_dense", PATH_DENSE_KEYS)
        above = a_number(dense.get("above_mu"), "path_dense.above_mu", "a number in [0, 1)", lambda v: not 0 <= v < 1)
        path_dense = PathDense(above, int_at_least(dense.get("every"), "path_dense.every", 1))
    per_prompt = raw.get("path_per_prompt", False)
    if not isinstance(per_prompt, bool):
        raise ConfigError(f"path_per_prompt must be true or false, got {per_prompt!r}")
    exact = next((a.name for a in arms if a.kind in ("exact", "anneal")), None)  # a sampling-free arm
    for key in ("path_dense", "path_per_prompt"):
        if raw.get(key) and exact is not None:
            raise ConfigError(
                f"{key} shapes the training path of sampled arms and points; arm {exact!r} is "
                "sampling-free (its path is every path_every steps, means only)"
            )
    checkpoint_every = raw.get("checkpoint_every")
    if checkpoint_every is not None:
        int_at_least(checkpoint_every, "checkpoint_every", 1)
        if exact is not None:
            raise ConfigError(f"checkpoint_every checkpoints runs trained by rlvr-div train; arm {exact!r} is "
                              "sampling-free (its runs start over); remove checkpoint_every or that arm")  # fmt: skip
        for a in arms:
            _check_generation_boundary(a, common, checkpoint_every)
    shared_prefix = raw.get("measure_shared_prefix", False)
    if not isinstance(shared_prefix, bool):
        raise ConfigError(f"measure_shared_prefix must be true or false, got {shared_prefix!r}")
    primary = None if raw.get("primary") is None else _primary(raw["primary"], arms, per_prompt)
    return Study(
        model=str(raw.get("model", "tiny")),
        task=str(raw.get("task", "pairsum")),
        task_options=dict(raw.get("task_options") or {}),
        seeds=tuple(seeds),
        workers=int_at_least(raw.get("workers", 1), "workers", 1),
        threads=int_at_least(raw.get("threads", 1), "threads", 1),
        betas=tuple(float(b) for b in betas),
        common=dict(common),
        ks=ks,
        path_every=int_at_least(raw.get("path_every", 25), "path_every", 1),
        convergence=convergence,
        arms=tuple(arms),
        root=str(root),
        gguf_file=None if raw.get("gguf_file") is None else str(raw["gguf_file"]),
        prompts=dict(prompts),
        samples=samples,
        measure_batch_size=int_at_least(raw.get("measure_batch_size", 512), "measure_batch_size", 1),
        reached_kl=a_number(raw.get("reached_kl", 0.01), "reached_kl", "a positive number", lambda v: not 0 < v < inf),
        path_dense=path_dense,
        path_per_prompt=per_prompt,
        primary=primary,
        checkpoint_every=checkpoint_every,
        measure_shared_prefix=shared_prefix,
    )


def _check_generation_boundary(arm: Arm, common: dict[str, Any], every: int) -> None:
    """Refuse a ``checkpoint_every`` that can fall inside one of TRL's generations: TRL generates a fresh batch every
    g = steps_per_generation × num_iterations micro-batches (steps_per_generation defaults to the gradient
    accumulation a, or generation_batch_size / per_device_train_batch_size; one process) and counts them from 0 again
    on a resume, so a run resumed at c optimiser steps generates where the run never interrupted did only if c·a is
    a multiple of g."""
    settings = read_yaml_mapping(Path(str(arm.recipe)), "recipe") | common | arm.overrides
    try:
        a = int(settings.get("gradient_accumulation_steps", 1))
        spg = settings.get("steps_per_generation")
        if spg is None and settings.get("generation_batch_size") is not None:
            spg = int(settings["generation_batch_size"]) // int(settings.get("per_device_train_batch_size", 8))
        g = int(spg or a) * int(settings.get("num_iterations", 1))
    except (TypeError, ValueError):
        return  # a malformed value: rlvr-div train refuses it with its own one-line error
    if g > 0 and every * a % g:
        raise ConfigError(
            f"checkpoint_every {every} falls inside a generation of arm {arm.name!r} (a fresh one every {g} "
            f"micro-batches, {a} per optimiser step), so a resumed run would generate at other steps; use a "
            f"multiple of {g // gcd(g, a)}"
        )


def _primary(raw: Any, arms: list[Arm], per_prompt: bool) -> Primary:
    """The ``primary`` block, checked: both arms exist, the key is a per-prompt path number, levels in (0, 1]."""
    p = checked_mapping(raw, "primary", PRIMARY_KEYS)
    names = [a.name for a in arms]
    for role in ("arm", "against"):
        if p.get(role) not in names:
            raise ConfigError(f"primary.{role} must name an arm ({', '.join(names)}), got {p.get(role)!r}")
    if p.get("key") not in PER_PROMPT_PATH_KEYS:
        raise ConfigError(f"primary.key must be one of {', '.join(PER_PROMPT_PATH_KEYS)}, got {p.get('key')!r}")
    levels = p.get("levels")
    if not number_list(levels, lambda v: 0 < v <= 1):
        raise ConfigError(f"primary.levels must be a non-empty list of validities in (0, 1], got {levels!r}")
    if p.get("direction") not in PRIMARY_DIRECTIONS:
        raise ConfigError(f"primary.direction must be one of {', '.join(PRIMARY_DIRECTIONS)}, got "
                          f"{p.get('direction')!r}")  # fmt: skip
    if not per_prompt:
        raise ConfigError("primary needs path_per_prompt: true (its interval resamples the prompts)")
    return Primary(p["arm"], p["against"], p["key"], tuple(float(v) for v in levels), p["direction"],
                   int_at_least(p.get("resamples", 2000), "primary.resamples", 1))  # fmt: skip


def study_runs(study: Study) -> list[StudyRun]:
    """Every run, in the config's order: sampled and anneal arms at every β (the arm's own list, or the study's) and
    seed (the arm's own seeds, or the study's; an anneal arm's seed is its perturbed start), the exact arm at every β
    once (it has no random stream), points at every seed."""
    runs: list[StudyRun] = []
    for arm in study.arms:
        betas = arm.betas or study.betas
        seeds = arm.seeds or study.seeds
        if arm.kind in ("sampled", "anneal"):
            runs += [StudyRun(arm.name, b, s) for b in betas for s in seeds]
        elif arm.kind == "exact":
            runs += [StudyRun(arm.name, b, study.seeds[0]) for b in betas]
        else:
            runs += [StudyRun(arm.name, None, s) for s in seeds]
    return runs


def predecessor(study: Study, run: StudyRun) -> StudyRun | None:
    """The run an anneal run warm-starts from: the same arm and start at the β before (None: the first β, which
    starts from the perturbed base, and every run of the other kinds)."""
    arm = study.arm(run.arm)
    if arm.kind != "anneal":
        return None
    betas = list(arm.betas or study.betas)
    i = betas.index(run.beta)
    return None if i == 0 else StudyRun(run.arm, betas[i - 1], run.seed)


def run_identity(study: Study, run: StudyRun) -> str:
    """A hash of everything a run's outcome depends on in the config (its arm, shared settings, the plateau rule, the
    recipe's text); a finished run whose identity changed is trained again."""
    arm = study.arm(run.arm)
    recipe_text = Path(arm.recipe).read_text() if arm.recipe else ""
    # the anneal arm's own settings count only when set, so the other arms' finished runs keep their identity
    own = {k: v for k, v in asdict(arm).items() if (k not in ANNEAL_ONLY or v is not None) and k != "seeds"}
    data = {
        "run": asdict(run), "arm": {**own, "recipe": recipe_text}, "model": study.model, "task": study.task,
        "task_options": study.task_options, "common": study.common, "ks": study.ks, "path_every": study.path_every,
        "convergence": {k: v for k, v in asdict(study.convergence).items() if k != "stop_at_mu" or v is not None},
    }  # fmt: skip
    # the settings added for the real-LM study count only when set, so the β study's finished runs keep their identity
    extra = {
        "gguf_file": study.gguf_file,
        "prompts": study.prompts,
        "samples": study.samples,
        "path_dense": study.path_dense and asdict(study.path_dense),
        "path_per_prompt": study.path_per_prompt,
    }
    data |= {k: v for k, v in extra.items() if v}
    if arm.kind in ("exact", "anneal"):  # they read only these of the shared settings, never stop at a plateau
        data["common"] = {k: study.common.get(k) for k in ("learning_rate", "temperature", "max_steps",
                                                            "max_grad_norm")}  # fmt: skip
        data["runs_to_budget"] = True
    before = predecessor(study, run)
    if before is not None:  # a warm start is only as current as the run it starts from
        data["starts_from"] = run_identity(study, before)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_arm_names(study: Study, names: tuple[str, ...], where: str = "--arms") -> None:
    """Raise a one-line :class:`ConfigError`, led by ``where`` (the option or file that gave them), naming the first
    of ``names`` that is not an arm of ``study``."""
    arms = [a.name for a in study.arms]
    unknown = [n for n in names if n not in arms]
    if unknown or not names:
        bad = repr(unknown[0]) if unknown else "an empty list"
        raise ConfigError(f"{where}: {bad} names no arm of the study (its arms: {', '.join(arms)})")
