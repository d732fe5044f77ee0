"""The collapse benchmark's configuration: a YAML file read into dataclasses, checked in one line per problem before
anything runs, and expanded into the runs it asks for.

A run is (task, method, coefficient value, seed): one training from the method's recipe with the benchmark's
shared settings (equal budgets: rollouts per step, steps, learning rate) and the task's options. Tuning: a method
with a ``tune`` grid trains the first seed at every value, the value with the best validation score is chosen
(:func:`selection_score`), and the other seeds train at that value only. The β sweep trains every seed at every
β for the divergence methods it names; its runs and the grid's share directories where they coincide.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from rlvr_div.errors import ConfigError
from rlvr_div.recipe import read_yaml_mapping

# keys that define a run itself, set by the benchmark (overriding them would desynchronise training and measurement)
RESERVED = {"task", "task_split", "task_size", "task_seed", "task_options", "seed", "output_dir", "model_name_or_path"}
TOP_KEYS = {
    "model",
    "seeds",
    "tune_seed",
    "workers",
    "threads",
    "common",
    "evaluation",
    "tasks",
    "methods",
    "beta_sweep",
    "baseline",
    "primary",
}
TASK_KEYS = {"name", "task", "task_options", "overrides", "methods", "rehearsal", "trajectory_every"}
METHOD_KEYS = {"name", "label", "recipe", "overrides", "tune", "rehearsal"}
SWEEP_KEYS = {"task", "betas", "methods", "key", "points"}
EVAL_KEYS = {"ks", "splits", "select_on", "report_on", "trajectory_every"}
PRIMARY_KEYS = {"task", "split", "class", "metric", "k", "min_difference", "alpha"}
# the per-class numbers a primary comparison can be made on (``collapse_bench.classes``): curves need a k
PRIMARY_METRICS = {"lost_at": True, "gained_at": True, "pass_at": True, "mu": False, "minority_share": False}


@dataclass(frozen=True)
class Method:
    """A method of the grid: its recipe, fixed overrides, and an optional tuning grid ``{key: [values]}``."""

    name: str
    label: str
    recipe: str
    overrides: dict[str, Any] = field(default_factory=dict)
    tune: dict[str, list[Any]] = field(default_factory=dict)
    rehearsal: bool = False  # DPH-RL: needs the offline stage's rehearsal set for the task

    @property
    def tune_key(self) -> str | None:
        return next(iter(self.tune), None)


@dataclass(frozen=True)
class Task:
    """A task of the grid: a registered task, its builder options, and overrides for every run on it."""

    name: str
    task: str
    task_options: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    methods: tuple[str, ...] | None = None  # None: every method
    rehearsal: dict[str, Any] = field(default_factory=dict)  # overrides of the offline stage (k, threshold, ...)
    trajectory_every: int | None = None  # None: the evaluation's; 0: no path measured while training


@dataclass(frozen=True)
class BetaSweep:
    """The seed paper's question: every seed at every β for these divergence methods (β = 0 is the baseline)."""

    task: str
    betas: tuple[float, ...]
    methods: tuple[str, ...]
    key: str = "divergence_coef"
    points: tuple[str, ...] = ()  # methods without a β (α-DPG) drawn as points at their chosen values


@dataclass(frozen=True)
class Primary:
    """A study's primary comparison, written in its config before the runs: every method against the baseline,
    seed by seed, on one per-class number (``metric`` at ``k`` on class ``cls`` of ``split``) of ``task`` (``*``:
    of each task, e.g. the settings of a robustness block, each its own family), with Holm's correction at ``alpha``
    over that family; a difference smaller than ``min_difference`` is not claimed."""

    task: str
    split: str
    cls: str
    metric: str
    k: int | None
    min_difference: float
    alpha: float = 0.05

    def describe(self) -> dict[str, Any]:
        return {"class" if key == "cls" else key: value for key, value in asdict(self).items()}


@dataclass(frozen=True)
class Evaluation:
    ks: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    splits: tuple[str, ...] = ("train", "validation", "test")
    select_on: str = "validation"
    report_on: str = "test"
    n: int = 128  # no longer read or settable (tasks are measured exactly); kept so stored fingerprints still match
    # enumerable tasks: measure the training prompts exactly every this many steps during training (0: only at the
    # end), the path against which runs are compared at matched validity
    trajectory_every: int = 10


@dataclass(frozen=True)
class Benchmark:
    model: str
    seeds: tuple[int, ...]  # the reported seeds
    tune_seed: int  # the seed every tuning grid is trained at; never reported, so the choice carries no luck
    workers: int
    threads: int
    common: dict[str, Any]
    evaluation: Evaluation
    tasks: tuple[Task, ...]
    methods: tuple[Method, ...]
    baseline: str
    beta_sweep: BetaSweep | None
    root: str  # the directory recipe paths are relative to
    primary: Primary | None = None

    def method(self, name: str) -> Method:
        return next(m for m in self.methods if m.name == name)

    def task(self, name: str) -> Task:
        return next(t for t in self.tasks if t.name == name)

    def trajectory_every(self, task: str) -> int:
        """Every how many steps a run on ``task`` measures its training prompts exactly (0: only at the end)."""
        every = self.task(task).trajectory_every
        return self.evaluation.trajectory_every if every is None else every

    def methods_of(self, task: Task) -> list[Method]:
        return [m for m in self.methods if task.methods is None or m.name in task.methods]

    def fingerprint(self) -> str:
        """A hash of what every run's measurement depends on (the base model and the evaluation settings); a rerun
        into the same directory must match it. Runs are checked one by one (:func:`run_identity`), so methods, seeds
        and tuning grids can be added to a benchmark without redoing what is finished."""
        data = json.dumps({"model": self.model, "evaluation": asdict(self.evaluation)}, sort_keys=True)
        return hashlib.sha256(data.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Run:
    """One training run and its measurement."""

    task: str
    method: str
    value: Any  # the tuned coefficient's value (None: the method has no tuning grid)
    seed: int

    @property
    def key(self) -> str:
        return f"{self.task}/{self.method}/{_value_label(self.value)}/seed{self.seed}"


def _value_label(value: Any) -> str:
    return "default" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def checked_mapping(obj: Any, where: str, keys: set[str] | None = None) -> dict[str, Any]:
    """``obj`` if it is a mapping with only ``keys`` (any keys without them); one-line ConfigError otherwise."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(obj).__name__}")
    unknown = sorted(set(obj) - keys) if keys is not None else []
    if unknown:
        raise ConfigError(f"{where} has an unknown key {unknown[0]!r}; known: {', '.join(sorted(keys))}")
    return obj


def _name(obj: dict[str, Any], where: str) -> str:
    name = obj.get("name")
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"{where} needs a `name` of letters, digits, '_' or '-', got {name!r}")
    return name


def load_benchmark(path: str | Path, overrides: dict[str, Any] | None = None) -> Benchmark:
    """Read and check a benchmark YAML file (``overrides`` replace top-level keys, e.g. seeds from the CLI)."""
    path = Path(path)
    raw = checked_mapping(read_yaml_mapping(path, "benchmark config"), f"benchmark config {str(path)!r}", TOP_KEYS)
    raw = {**raw, **(overrides or {})}
    root = path.resolve().parent
    seeds = raw.get("seeds", [0, 1, 2])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"seeds must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds {seeds} repeat a seed")
    tune_seed = raw.get("tune_seed", 0)
    if not isinstance(tune_seed, int) or tune_seed in seeds:
        raise ConfigError(f"tune_seed must be an integer that is not a reported seed {seeds}, got {tune_seed!r}")
    workers, threads = (int_at_least(raw.get(key, 1), key, 1) for key in ("workers", "threads"))
    common = checked_mapping(raw.get("common", {}), "common")
    _no_reserved(common, "common")
    ev = checked_mapping(raw.get("evaluation", {}), "evaluation", EVAL_KEYS)
    evaluation = Evaluation(**ev)  # then the YAML's lists as tuples, ks as integers
    evaluation = replace(evaluation, ks=tuple(int(k) for k in evaluation.ks), splits=tuple(evaluation.splits))
    int_at_least(evaluation.trajectory_every, "evaluation.trajectory_every", 0)
    if not evaluation.ks or min(evaluation.ks) < 1 or list(evaluation.ks) != sorted(set(evaluation.ks)):
        raise ConfigError(f"evaluation.ks must be increasing integers >= 1, got {list(evaluation.ks)}")
    for key in ("select_on", "report_on"):
        if getattr(evaluation, key) not in evaluation.splits:
            raise ConfigError(f"evaluation.{key}={getattr(evaluation, key)!r} is not one of the splits")
    methods = []
    for i, m in enumerate(raw.get("methods") or []):
        m = checked_mapping(m, f"methods[{i}]", METHOD_KEYS)
        name = _name(m, f"methods[{i}]")
        recipe = recipe_file(root, m.get("recipe"), f"method {name!r}")
        tune = m.get("tune") or {}
        if not isinstance(tune, dict) or len(tune) > 1 or any(not isinstance(v, list) or not v for v in tune.values()):
            raise ConfigError(f"method {name!r}: tune must map one recipe key to a non-empty list of values")
        _no_reserved(m.get("overrides") or {}, f"method {name!r} overrides")
        methods.append(Method(name, str(m.get("label", name)), str(recipe), dict(m.get("overrides") or {}),
                              dict(tune), bool(m.get("rehearsal", False))))  # fmt: skip
    names = [m.name for m in methods]
    if not methods or len(set(names)) != len(names):
        raise ConfigError(f"methods must be a non-empty list with distinct names, got {names}")
    baseline = raw.get("baseline", names[0])
    if baseline not in names:
        raise ConfigError(f"baseline {baseline!r} is not a method; methods: {', '.join(names)}")
    from rlvr_div.tasks import get_task_spec

    tasks = []
    for i, t in enumerate(raw.get("tasks") or []):
        t = checked_mapping(t, f"tasks[{i}]", TASK_KEYS)
        name = _name(t, f"tasks[{i}]")
        only = t.get("methods")
        if only is not None:
            bad = [x for x in only if x not in names]
            if bad:
                raise ConfigError(f"task {name!r} lists unknown method {bad[0]!r}; methods: {', '.join(names)}")
            if baseline not in only:
                raise ConfigError(f"task {name!r} must run the baseline {baseline!r}")
        _no_reserved(t.get("overrides") or {}, f"task {name!r} overrides")
        if get_task_spec(str(t.get("task", name))).valid_completions is None:
            raise ConfigError(f"task {name!r}: {t.get('task', name)!r} cannot list its valid completions, and the "
                              "benchmark measures exactly (sampled pass@k: rlvr-div eval)")  # fmt: skip
        if t.get("trajectory_every") is not None:
            int_at_least(t["trajectory_every"], f"task {name!r} trajectory_every", 0)
        tasks.append(Task(name, str(t.get("task", name)), dict(t.get("task_options") or {}),
                          dict(t.get("overrides") or {}), tuple(only) if only else None,
                          dict(t.get("rehearsal") or {}), t.get("trajectory_every")))  # fmt: skip
    if not tasks or len({t.name for t in tasks}) != len(tasks):
        raise ConfigError("tasks must be a non-empty list with distinct names")
    sweep = None
    if raw.get("beta_sweep"):
        s = checked_mapping(raw["beta_sweep"], "beta_sweep", SWEEP_KEYS)
        if s.get("task") not in {t.name for t in tasks}:
            raise ConfigError(f"beta_sweep.task {s.get('task')!r} is not one of the tasks")
        betas = tuple(float(b) for b in s.get("betas", []))
        if not betas or min(betas) < 0:
            raise ConfigError(f"beta_sweep.betas must be non-negative numbers, got {list(betas)}")
        bad = [x for x in s.get("methods", []) if x not in names]
        if bad or not s.get("methods"):
            raise ConfigError(f"beta_sweep.methods: unknown or empty {bad or s.get('methods')}")
        key = str(s.get("key", "divergence_coef"))
        for i, m in enumerate(methods):
            if m.name in s["methods"]:
                if m.tune_key not in (None, key):
                    raise ConfigError(f"beta_sweep method {m.name!r} tunes {m.tune_key!r}, not the swept {key!r}")
                tune = {key: [float(v) for v in m.tune.get(key, [])]} if m.tune else {}
                methods[i] = replace(m, tune=tune)  # β values as floats
        points = tuple(s.get("points") or ())
        bad = [x for x in points if x not in names]
        if bad:
            raise ConfigError(f"beta_sweep.points: unknown method {bad[0]!r}")
        sweep = BetaSweep(s["task"], betas, tuple(s["methods"]), key, points)
    primary = _primary(raw.get("primary"), tasks, evaluation) if raw.get("primary") is not None else None
    return Benchmark(
        model=str(raw.get("model", "tiny")),
        seeds=tuple(seeds),
        tune_seed=tune_seed,
        workers=workers,
        threads=threads,
        common=dict(common),
        evaluation=evaluation,
        tasks=tuple(tasks),
        methods=tuple(methods),
        baseline=baseline,
        beta_sweep=sweep,
        root=str(root),
        primary=primary,
    )


def _primary(raw: Any, tasks: list[Task], evaluation: Evaluation) -> Primary:
    """The checked ``primary`` section (one line per problem)."""
    p = checked_mapping(raw, "primary", PRIMARY_KEYS)
    missing = sorted({"task", "split", "class", "metric", "min_difference"} - set(p))
    if missing:
        raise ConfigError(f"primary needs {missing[0]!r}")
    from rlvr_div.tasks import get_task_spec

    chosen = tasks if p["task"] == "*" else [t for t in tasks if t.name == p["task"]]
    if not chosen:
        raise ConfigError(f"primary.task {p['task']!r} is not one of the tasks (or '*' for each of them)")
    for task in chosen:
        if get_task_spec(task.task).class_column is None:
            raise ConfigError(f"primary.task {p['task']!r}: task {task.task!r} has no prompt classes to compare on")
    if p["split"] not in evaluation.splits:
        raise ConfigError(f"primary.split {p['split']!r} is not one of the splits {list(evaluation.splits)}")
    if p["metric"] not in PRIMARY_METRICS:
        raise ConfigError(f"primary.metric {p['metric']!r} is not one of {', '.join(PRIMARY_METRICS)}")
    k = p.get("k")
    if PRIMARY_METRICS[p["metric"]] and k not in evaluation.ks:
        raise ConfigError(f"primary.k {k!r} is not one of evaluation.ks {list(evaluation.ks)}")

    min_difference = a_number(p["min_difference"], "primary.min_difference", "a number >= 0", lambda v: v < 0)
    alpha = a_number(p.get("alpha", 0.05), "primary.alpha", "a number in (0, 1)", lambda v: not 0 < v < 1)
    return Primary(str(p["task"]), p["split"], str(p["class"]), p["metric"], k, min_difference, alpha)


def is_number(x: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def a_number(value: Any, where: str, what: str, refuse: Callable[[float], bool]) -> float:
    """``value`` as a float if it is a number that ``refuse`` does not refuse; else the one-line ConfigError
    "``where`` must be ``what``, got ``value``"."""
    if not is_number(value) or refuse(value):
        raise ConfigError(f"{where} must be {what}, got {value!r}")
    return float(value)


def number_list(value: Any, ok: Callable[[float], bool]) -> bool:
    """Whether ``value`` is a non-empty list of numbers that all pass ``ok``."""
    return isinstance(value, list) and bool(value) and all(is_number(v) and ok(v) for v in value)


def int_at_least(value: Any, where: str, low: int) -> int:
    """``value`` if it is an integer (not a bool) >= ``low``; else a one-line ConfigError naming ``where``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{where} must be an integer >= {low}, got {value!r}")
    return value


def recipe_file(root: Path, recipe: Any, where: str) -> str:
    """The recipe file ``recipe`` names, relative to the config's directory ``root``; a ConfigError if none."""
    path = root / str(recipe or "")
    if not recipe or not path.is_file():
        raise ConfigError(f"{where}: recipe {recipe!r} is not a file (relative to {root})")
    return str(path)


def _no_reserved(settings: dict[str, Any], where: str) -> None:
    bad = sorted(set(settings) & RESERVED)
    if bad:
        raise ConfigError(f"{where} sets {bad[0]!r}, which the benchmark sets for each run (task, split, seed, ...)")


def run_argv(bench: Benchmark, run: Run, output_dir: str | Path, rehearsal_path: str | Path | None) -> list[str]:
    """The ``rlvr-div train`` arguments of a run: the method's recipe, then (later wins) the benchmark's shared
    settings, the task's overrides, the method's overrides, the tuned value, and the run's own identity."""
    task, method = bench.task(run.task), bench.method(run.method)
    settings: dict[str, Any] = {"model_name_or_path": bench.model, **bench.common, **task.overrides}
    settings |= method.overrides
    sweep = bench.beta_sweep
    if sweep is not None and run.method in sweep.methods and run.value is not None:
        settings[sweep.key] = run.value
    elif method.tune_key is not None and run.value is not None:
        settings[method.tune_key] = run.value
    settings |= run_settings(task.task, task.task_options, run.seed, output_dir)
    if method.rehearsal:  # the set's offline-stage settings too, which training checks against the stored set
        from rlvr_div.trainers.dph import OFFLINE_STAGE_KEYS

        settings |= {k: v for k, v in task.rehearsal.items() if k in OFFLINE_STAGE_KEYS.values()}
        settings["rehearsal_path"] = str(rehearsal_path)
    return recipe_argv(method.recipe, settings)


def run_settings(task: str, task_options: dict[str, Any], seed: int, output_dir: Path | str) -> dict[str, Any]:
    """The settings every benchmark run passes to ``rlvr-div train`` last: the task's training split, the seed and
    ``output_dir``, nothing saved or reported."""
    return {
        "task": task, "task_split": "train", "task_options": json.dumps(task_options), "seed": seed,
        "output_dir": str(output_dir), "overwrite_output_dir": True, "save_strategy": "no", "report_to": "none",
        "disable_tqdm": True,
    }  # fmt: skip


def recipe_argv(recipe: str, settings: dict[str, Any]) -> list[str]:
    """``rlvr-div train`` arguments: ``--config recipe`` then ``--key=value`` for each setting (later wins; mappings
    as JSON, booleans lower-case), a list as ``--key item item …`` (the parser's form for list fields)."""
    argv = ["--config", recipe]
    for key, value in settings.items():
        if isinstance(value, list):
            argv += [f"--{key}", *(str(v) for v in value)]
            continue
        text = json.dumps(value) if isinstance(value, dict) else str(value).lower() if isinstance(
            value, bool) else str(value)  # fmt: skip
        argv.append(f"--{key}={text}")
    return argv


def run_identity(bench: Benchmark, run: Run) -> dict:
    """What a finished run must still match to be reused: its training arguments (output paths written relative to
    the benchmark's directory, so the same directory given another way matches; the recipe relative to the config,
    so a checkout moved or cloned elsewhere matches) and the recipe's own settings that the
    arguments do not override (so comments, or a key the benchmark sets anyway, can change without retraining),
    and how often it measures its path while training (a result without the path the benchmark asks for is stale)."""
    argv = run_argv(bench, run, f"<out>/runs/{run.key}", f"<out>/rehearsal/{run.task}")
    # the offline stage's settings only check the stored set (at <out>/rehearsal/<task>), which decides them
    from rlvr_div.trainers.dph import OFFLINE_STAGE_KEYS

    argv = [a for a in argv if a[2:].split("=", 1)[0] not in OFFLINE_STAGE_KEYS.values()]
    argv[1] = os.path.relpath(argv[1], bench.root)  # the recipe as the config names it: the checkout may move
    overridden = {a[2:].split("=", 1)[0] for a in argv if a.startswith("--") and "=" in a}
    recipe = yaml.safe_load(Path(bench.method(run.method).recipe).read_text()) or {}
    kept = {k: v for k, v in recipe.items() if k not in overridden}
    recipe_hash = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()
    return {"argv": argv, "recipe": recipe_hash, "trajectory_every": bench.trajectory_every(run.task)}


def grid_runs(bench: Benchmark) -> tuple[list[Run], list[Run]]:
    """(runs that need no selection, first-seed tuning runs); the other seeds of a tuned method follow selection."""
    fixed: list[Run] = []
    tuning: list[Run] = []
    for task in bench.tasks:
        for m in bench.methods_of(task):
            if m.tune_key is None:
                fixed += [Run(task.name, m.name, None, s) for s in bench.seeds]
            else:
                tuning += [Run(task.name, m.name, v, bench.tune_seed) for v in m.tune[m.tune_key]]
    sweep = bench.beta_sweep
    if sweep is not None:
        for name in sweep.methods:
            fixed += [Run(sweep.task, name, b, s) for b in sweep.betas if b > 0 for s in bench.seeds]
    fixed = list(dict.fromkeys(fixed))
    tuning = [r for r in dict.fromkeys(tuning) if r not in fixed]
    return fixed, tuning


def selection_score(metrics: dict[str, Any], kmax: int) -> float:
    """The tuning criterion, the same for every method: pass@1 + cov@K on the selection split (K the largest k),
    where cov@K is the expected p*-mass of the valid answers seen in K draws (pass@K for a one-answer task): it
    rewards validity and coverage of the filtered model equally."""
    return float(metrics["pass_at"]["1"]) + float(metrics["cov_at"][str(kmax)])
