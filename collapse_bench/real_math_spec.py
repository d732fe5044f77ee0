"""The real-math study's configuration (issue 62, ``bench/real_math.yaml``): the model, the task, the training pool and
its filter, the evaluation protocol, the shared training settings, the arms, the seeds and the primary comparison
declared before the runs; every problem is one :class:`ConfigError` line before anything runs. The keys::

    model: package:NAME | a directory | a hub id | tiny      gguf_file: NAME.gguf (optional: the model's GGUF file)
    task: a registered task     task_options: {...}         threads: N (train's and eval's --threads; optional)
    verifier: {...}  settings of the task's own reward for training and every evaluation, e.g. {fallback:
             last_number} (optional; the OOD task must score with the same reward)
    train:   {split: train, filter: {n, limit, temperature, top_p, max_new_tokens}}   (filter optional: a task with
             an `indices` option; its sampling defaults to common's temperature, top_p, max_completion_length)
    eval:    {split: test, limit, path_limit, n_path, n_end, max_new_tokens, temperature: 1, top_p: 1, path_every,
              ks (from 1, up to n_end), batch_size, seed: 0,
              ood: {task, task_options, split: test, limit, n, max_new_tokens},       (optional)
              protocols: [{name, temperature, top_p}, ...]}                          (optional, descriptive)
    common:  rlvr-div train settings of every arm (max_steps required; none of RESERVED)
    arms:    [{name, label, recipe (relative to the config), overrides (none of RESERVED, no max_steps), seeds}]
    seeds:   [s, ...] (an arm's seeds are some of them)
    primary: {metric: lost_at_k | gained_at_k, k (<= n_path), against, arms (default: every other), matched:
              pass_at_1, levels, family: holm, alpha: 0.05, direction: negative | positive, resamples: 2000}

Running the study is :mod:`collapse_bench.real_math_runs`, its report :mod:`collapse_bench.real_math_report`.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from collapse_bench.spec import a_number, checked_mapping, int_at_least, is_number, recipe_file
from rlvr_div.errors import ConfigError
from rlvr_div.recipe import read_yaml_mapping

TOP_KEYS = {"model", "gguf_file", "task", "task_options", "threads", "verifier", "train", "eval", "common", "arms",
            "seeds", "primary", "draft"}  # fmt: skip
TRAIN_KEYS = {"split", "filter"}
FILTER_KEYS = {"n", "limit", "temperature", "top_p", "max_new_tokens"}
EVAL_KEYS = {"split", "limit", "path_limit", "n_path", "n_end", "max_new_tokens", "temperature", "top_p",
             "path_every", "ks", "batch_size", "seed", "ood", "protocols"}  # fmt: skip
PROTOCOL_KEYS = {"name", "temperature", "top_p"}
OOD_KEYS = {"task", "task_options", "split", "limit", "n", "max_new_tokens"}
ARM_KEYS = {"name", "label", "recipe", "overrides", "seeds"}
PRIMARY_KEYS = {"metric", "k", "against", "arms", "matched", "levels", "family", "alpha", "direction", "resamples"}
METRICS = ("lost_at_k", "gained_at_k")
MATCHED = ("pass_at_1",)
FAMILIES = ("holm",)
DIRECTIONS = ("negative", "positive")
# what the driver sets for each run (a common or arm setting would desynchronise training, evaluation and resume)
RESERVED = {"model_name_or_path", "gguf_file", "task", "task_split", "task_options", "task_size", "data_path", "seed",
            "output_dir", "save_strategy", "save_steps", "save_total_limit", "resume_from_checkpoint",
            "overwrite_output_dir", "rehearsal_path", "threads", "rewards", "reward_kwargs"}  # fmt: skip
# the run settings the driver puts first, under the study's common ones (a common key replaces them)
RUN_DEFAULTS = {"report_to": "none", "disable_tqdm": True, "logging_steps": 1}
INDICES_OPTION = "indices"  # the task option that restricts a split to the filtered problems (wordmath has it)


@dataclass(frozen=True)
class Filter:
    """Keep the training problems the base solves at least once in ``n`` samples (DAPO's and verl's dynamic-sampling
    filter, done once): the first ``limit`` problems of the training split are sampled (all when None) at the
    training's temperature, top-p and completion length unless given here."""

    n: int
    limit: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None


@dataclass(frozen=True)
class Ood:
    """The out-of-distribution set, evaluated for the base and every end point (``n`` samples per problem, at the
    held-out sampling settings; ``max_new_tokens`` None: the held-out one)."""

    task: str
    task_options: dict[str, Any]
    split: str
    limit: int | None
    n: int
    max_new_tokens: int | None = None


@dataclass(frozen=True)
class Protocol:
    """Another sampling protocol for the base and every end point (e.g. Yue et al.'s T 0.6, top-p 0.95): ``n_end``
    samples on the held-out problems at this temperature and top-p; descriptive."""

    name: str
    temperature: float
    top_p: float


@dataclass(frozen=True)
class Evaluation:
    """Held-out evaluation: ``n_end`` samples on the first ``limit`` problems of ``split`` for the base and each end
    point; ``n_path`` samples on the first ``path_limit`` of them at every checkpoint (one every ``path_every``
    steps); pass@k at ``ks`` (those <= n_path along the path)."""

    split: str
    limit: int | None
    path_limit: int | None
    n_path: int
    n_end: int
    max_new_tokens: int
    temperature: float
    top_p: float
    path_every: int
    ks: tuple[int, ...]
    batch_size: int | None = None
    seed: int = 0
    ood: Ood | None = None
    protocols: tuple[Protocol, ...] = ()

    @property
    def path_ks(self) -> tuple[int, ...]:
        return tuple(k for k in self.ks if k <= self.n_path)


@dataclass(frozen=True)
class Arm:
    name: str
    label: str
    recipe: str  # absolute path
    overrides: dict[str, Any]
    seeds: tuple[int, ...]
    rehearsal: bool  # DPH-RL: the recipe has a rehearsal_path, so the offline stage runs first


@dataclass(frozen=True)
class Primary:
    """The comparison declared before the runs: ``metric`` (problems lost, or gained, against the base at ``k``,
    expected counts from the unbiased per-problem pass@k) of each of ``arms`` minus ``against``, read off both
    held-out paths of each seed where held-out pass@1 equals each of ``levels`` (linear between path points), paired
    by seed; ``family`` correction at ``alpha`` over every (arm, level); ``direction``: the sign a remedy's claim
    needs (negative: fewer problems lost than GRPO)."""

    metric: str
    k: int
    against: str
    arms: tuple[str, ...]
    matched: str
    levels: tuple[float, ...]
    family: str = "holm"
    alpha: float = 0.05
    direction: str = "negative"
    resamples: int = 2000


@dataclass(frozen=True)
class Study:
    model: str
    task: str
    task_options: dict[str, Any]
    train_split: str
    filter: Filter | None
    eval: Evaluation
    common: dict[str, Any]
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    primary: Primary | None
    root: str  # the config's directory (recipes are relative to it)
    gguf_file: str | None = None
    threads: int | None = None
    # settings of the task's own reward (its verifier), given to training (reward_kwargs) and to every evaluation
    # (--reward-arg); empty: the task's defaults
    verifier: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> str:
        """The name of the task's own reward, which trains and scores every run of the study."""
        from rlvr_div.tasks import get_task_spec

        return get_task_spec(self.task).reward

    @property
    def max_steps(self) -> int:
        return int(self.common["max_steps"])

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def describe(self) -> dict[str, Any]:
        """The configuration as plain JSON (recorded in the study's state file)."""
        return json.loads(json.dumps(asdict(self), default=str))


@dataclass(frozen=True)
class StudyRun:
    arm: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.arm}/seed{self.seed}"


# --------------------------------------------------------------------------------------------- reading


def _int_or_none(value: Any, where: str, low: int = 1) -> int | None:
    return None if value is None else int_at_least(value, where, low)


def _options(value: Any, where: str) -> dict[str, Any]:
    return dict(checked_mapping(value if value is not None else {}, where))


def _check_task(task: Any, options: dict[str, Any], where: str, check_inputs: bool) -> str:
    """A registered task whose options its builder takes (and, with ``check_inputs``, whose data is there)."""
    from rlvr_div.tasks import check_task, get_task_spec

    if not isinstance(task, str) or not task:
        raise ConfigError(f"{where} must name a registered task (rlvr-div list), got {task!r}")
    spec = get_task_spec(task)
    if check_inputs:
        check_task(task, **options)
    else:
        params = inspect.signature(spec.build).parameters
        takes = set(params) - {"split", "seed"}
        unknown = sorted(set(options) - takes)
        if unknown and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            raise ConfigError(f"task {task!r} has no option {unknown[0]!r}; its options: {', '.join(sorted(takes))}")
    return task


def _no_reserved(settings: dict[str, Any], where: str) -> None:
    bad = sorted(set(settings) & RESERVED)
    if bad:
        raise ConfigError(f"{where} sets {bad[0]!r}, which the study sets for each run")


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in value)
        or len(set(value)) != len(value)
    ):
        raise ConfigError(f"{where} must be a non-empty list of distinct integers, got {value!r}")
    return tuple(value)


def _sampling(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """temperature (> 0), top_p (in (0, 1]) and max_new_tokens (>= 1) where given."""
    out: dict[str, Any] = {}
    if raw.get("temperature") is not None:
        out["temperature"] = a_number(raw["temperature"], f"{where}.temperature", "a number > 0", lambda v: v <= 0)
    if raw.get("top_p") is not None:
        out["top_p"] = a_number(raw["top_p"], f"{where}.top_p", "a number in (0, 1]", lambda v: not 0 < v <= 1)
    if raw.get("max_new_tokens") is not None:
        out["max_new_tokens"] = int_at_least(raw["max_new_tokens"], f"{where}.max_new_tokens", 1)
    return out


def _evaluation(raw: Any, check_inputs: bool) -> Evaluation:
    e = checked_mapping(raw, "eval", EVAL_KEYS)
    for key in ("n_path", "n_end", "max_new_tokens", "path_every", "ks"):
        if key not in e:
            raise ConfigError(f"eval needs {key!r}")
    n_path, n_end = int_at_least(e["n_path"], "eval.n_path", 1), int_at_least(e["n_end"], "eval.n_end", 1)
    ks = e["ks"]
    if (
        not isinstance(ks, list)
        or not ks
        or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in ks)
        or ks != sorted(set(ks))
    ):
        raise ConfigError(f"eval.ks must be a non-empty increasing list of integers >= 1, got {ks!r}")
    if ks[-1] > n_end:
        raise ConfigError(f"eval.ks goes up to {ks[-1]}, more than eval.n_end = {n_end} samples per problem")
    if ks[0] != 1:
        raise ConfigError("eval.ks must start at 1 (the paths are matched on pass@1)")
    if n_path > n_end:
        raise ConfigError(f"eval.n_path ({n_path}) must be at most eval.n_end ({n_end})")
    limit = _int_or_none(e.get("limit"), "eval.limit")
    path_limit = _int_or_none(e.get("path_limit", limit), "eval.path_limit")
    if limit is not None and (path_limit is None or path_limit > limit):
        raise ConfigError(f"eval.path_limit ({path_limit}) must be at most eval.limit ({limit}): the path's problems "
                          "are the first of the end point's")  # fmt: skip
    sampling = {"temperature": 1.0, "top_p": 1.0, **_sampling(e, "eval")}
    ood = None
    if e.get("ood") is not None:
        o = checked_mapping(e["ood"], "eval.ood", OOD_KEYS)
        if "n" not in o or "task" not in o:
            raise ConfigError("eval.ood needs 'task' and 'n'")
        options = _options(o.get("task_options"), "eval.ood.task_options")
        task = _check_task(o["task"], options, "eval.ood.task", check_inputs)
        split = o.get("split", "test")
        if not isinstance(split, str):
            raise ConfigError(f"eval.ood.split must be a split name, got {split!r}")
        ood = Ood(task, options, split, _int_or_none(o.get("limit"), "eval.ood.limit"), int_at_least(o["n"],
                  "eval.ood.n", 1), _int_or_none(o.get("max_new_tokens"), "eval.ood.max_new_tokens"))  # fmt: skip
    protocols = []
    for i, item in enumerate(e.get("protocols") or []):
        q = checked_mapping(item, f"eval.protocols[{i}]", PROTOCOL_KEYS)
        name = q.get("name")
        if not isinstance(name, str) or not name.isidentifier() or name in [x.name for x in protocols]:
            raise ConfigError(f"eval.protocols[{i}] needs a distinct `name` of letters, digits and '_', got {name!r}")
        if "temperature" not in q or "top_p" not in q:
            raise ConfigError(f"eval.protocols[{i}] needs 'temperature' and 'top_p'")
        protocols.append(Protocol(name, **_sampling(q, f"eval.protocols[{i}]")))
    split = e.get("split", "test")
    if not isinstance(split, str):
        raise ConfigError(f"eval.split must be a split name, got {split!r}")
    seed = e.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"eval.seed must be an integer, got {seed!r}")
    return Evaluation(split, limit, path_limit, n_path, n_end, int_at_least(e["max_new_tokens"], "eval.max_new_tokens",
                      1), sampling["temperature"], sampling["top_p"], int_at_least(e["path_every"], "eval.path_every",
                      1), tuple(ks), _int_or_none(e.get("batch_size"), "eval.batch_size"), seed, ood,
                      tuple(protocols))  # fmt: skip


def _verifier(raw: Any, task: str, options: dict[str, Any], ood: Ood | None) -> dict[str, Any]:
    """The ``verifier`` settings, checked as the reward takes them (one line) before anything runs; the OOD task must
    score with the same reward, which they set too."""
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task_spec, task_reward_settings

    settings = _options(raw, "verifier")
    if not settings:
        return {}
    reward = get_task_spec(task).reward
    other = get_task_spec(ood.task).reward if ood is not None else reward
    if other != reward:
        raise ConfigError(f"verifier sets {reward!r}, which scores task {task!r}, but eval.ood's task {ood.task!r} "
                          f"scores with {other!r}; the verifier applies to every evaluation")  # fmt: skip
    get_reward(reward, **task_reward_settings(task, reward, settings, **options))
    return settings


def _filter(raw: Any, task: str) -> Filter | None:
    if raw is None:
        return None
    f = checked_mapping(raw, "train.filter", FILTER_KEYS)
    if "n" not in f:
        raise ConfigError("train.filter needs 'n' (samples per training problem)")
    from rlvr_div.tasks import get_task_spec

    if INDICES_OPTION not in inspect.signature(get_task_spec(task).build).parameters:
        raise ConfigError(f"train.filter needs a task with an {INDICES_OPTION!r} option (wordmath has one); task "
                          f"{task!r} has none")  # fmt: skip
    return Filter(int_at_least(f["n"], "train.filter.n", 1), _int_or_none(f.get("limit"), "train.filter.limit"),
                  **_sampling(f, "train.filter"))  # fmt: skip


def _arm(raw: Any, i: int, root: Path, seeds: tuple[int, ...]) -> Arm:
    a = checked_mapping(raw, f"arms[{i}]", ARM_KEYS)
    name = a.get("name")
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"arms[{i}] needs a `name` of letters, digits, '_' or '-', got {name!r}")
    recipe = recipe_file(root, a.get("recipe"), f"arm {name!r}")
    overrides = _options(a.get("overrides"), f"arm {name!r}: overrides")
    _no_reserved(overrides, f"arm {name!r}: overrides")
    if "max_steps" in overrides:
        raise ConfigError(f"arm {name!r}: overrides sets 'max_steps'; equal budgets: it is common.max_steps for "
                          "every arm")  # fmt: skip
    own = _seeds(a["seeds"], f"arm {name!r}: seeds") if "seeds" in a else seeds
    extra = [s for s in own if s not in seeds]
    if extra:
        raise ConfigError(f"arm {name!r}: seed {extra[0]} is not one of the study's seeds {list(seeds)}")
    label = a.get("label", name)
    if not isinstance(label, str):
        raise ConfigError(f"arm {name!r}: label must be text, got {label!r}")
    recipe_keys = yaml.safe_load(Path(recipe).read_text()) or {}
    return Arm(name, label, recipe, overrides, tuple(s for s in seeds if s in own), "rehearsal_path" in recipe_keys)


def _primary(raw: Any, arms: tuple[Arm, ...], evaluation: Evaluation) -> Primary:
    p = checked_mapping(raw, "primary", PRIMARY_KEYS)
    for key in ("metric", "k", "against", "levels"):
        if key not in p:
            raise ConfigError(f"primary needs {key!r}")
    names = [a.name for a in arms]

    def one_of(key: str, allowed: tuple[str, ...] | list[str], default: str | None = None) -> str:
        value = p.get(key, default)
        if value not in allowed:
            raise ConfigError(f"primary.{key} must be one of {', '.join(allowed)}, got {value!r}")
        return value

    metric, against = one_of("metric", METRICS), one_of("against", names)
    k = int_at_least(p["k"], "primary.k", 1)
    if k > evaluation.n_path:
        raise ConfigError(f"primary.k = {k} needs at least {k} samples per problem along the paths (eval.n_path is "
                          f"{evaluation.n_path})")  # fmt: skip
    chosen = p.get("arms", [n for n in names if n != against])
    if not isinstance(chosen, list) or not chosen or any(c not in names or c == against for c in chosen):
        raise ConfigError(f"primary.arms must list arms other than {against!r} (of {', '.join(names)}), got "
                          f"{chosen!r}")  # fmt: skip
    levels = p["levels"]
    if not isinstance(levels, list) or not levels or not all(is_number(v) and 0 < v < 1 for v in levels):
        raise ConfigError(f"primary.levels must be a non-empty list of pass@1 values in (0, 1), got {levels!r}")
    alpha = a_number(p.get("alpha", 0.05), "primary.alpha", "a number in (0, 1)", lambda v: not 0 < v < 1)
    resamples = int_at_least(p.get("resamples", 2000), "primary.resamples", 100)
    return Primary(metric, k, against, tuple(chosen), one_of("matched", MATCHED, "pass_at_1"),
                   tuple(float(v) for v in levels), one_of("family", FAMILIES, "holm"), alpha,
                   one_of("direction", DIRECTIONS, "negative"), resamples)  # fmt: skip


def load_study(path: str | Path, check_inputs: bool = True) -> Study:
    """Read and check a real-math study config, one line per problem, before anything runs; ``check_inputs``: also
    the tasks' data (not needed to write the report)."""
    path = Path(path)
    raw = checked_mapping(read_yaml_mapping(path, "real-math study config"), f"real-math config {str(path)!r}",
                          TOP_KEYS)  # fmt: skip
    root = path.resolve().parent
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise ConfigError(f"model must name a model (a path, hub id, 'tiny' or package:NAME), got {model!r}")
    gguf = raw.get("gguf_file")
    if gguf is not None and (not isinstance(gguf, str) or not gguf.endswith(".gguf")):
        raise ConfigError(f"gguf_file must be a .gguf file name, got {gguf!r}")
    task_options = _options(raw.get("task_options"), "task_options")
    if INDICES_OPTION in task_options:
        raise ConfigError(f"task_options sets {INDICES_OPTION!r}, which the study's train.filter sets")
    task = _check_task(raw.get("task"), task_options, "task", check_inputs)
    threads = _int_or_none(raw.get("threads"), "threads")
    train = checked_mapping(raw.get("train") or {}, "train", TRAIN_KEYS)
    train_split = train.get("split", "train")
    if not isinstance(train_split, str):
        raise ConfigError(f"train.split must be a split name, got {train_split!r}")
    if "eval" not in raw:
        raise ConfigError("the config needs an 'eval' block")
    evaluation = _evaluation(raw["eval"], check_inputs)
    common = dict(checked_mapping(raw.get("common") or {}, "common"))
    _no_reserved(common, "common")
    int_at_least(common.get("max_steps"), "common.max_steps", 1)
    seeds = _seeds(raw.get("seeds"), "seeds")
    if not isinstance(raw.get("arms"), list) or not raw["arms"]:
        raise ConfigError("arms must be a non-empty list")
    arms = tuple(_arm(a, i, root, seeds) for i, a in enumerate(raw["arms"]))
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ConfigError(f"arm names repeat: {names}")
    train_filter = _filter(train.get("filter"), task)
    if train_filter is not None and train_filter.max_new_tokens is None and "max_completion_length" not in common:
        raise ConfigError("train.filter needs max_new_tokens (or common.max_completion_length)")
    primary = _primary(raw["primary"], arms, evaluation) if raw.get("primary") is not None else None
    verifier = _verifier(raw.get("verifier"), task, task_options, evaluation.ood)
    return Study(model, task, task_options, train_split, train_filter, evaluation, common, arms,
                 seeds, primary, str(root), gguf, threads, verifier)  # fmt: skip
