"""The recipe layer: the keys a recipe may hold, reading it the TRL way, and the checks made before any model loads.

``parse_recipe`` reads ``--config recipe.yaml`` plus command-line overrides with TRL's ``TrlParser`` into
(:class:`ScriptArguments`, the trainer's config class, ``trl.ModelConfig``); ``validate`` checks names, paths, value
ranges, the model reference, LoRA targets, logging backends and the DPH-RL rehearsal set (the checks that need more
than a lookup are in :mod:`rlvr_div.preflight`). ``train``, ``rehearse``, the demo and the collapse benchmark all start
here; nothing here loads a model.

Relative paths, in a recipe or on the command line, are relative to the current directory, as in TRL (``data_path``,
``model_name_or_path``, ``rehearsal_path``, ``output_dir``, ``resume_from_checkpoint``); the recipes under
``recipes/`` are written to run from the repository root. A relative path that does not exist is reported with the
directory it was looked up in.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NoReturn

import yaml

from rlvr_div.errors import ConfigError, relative_path_hint


def _from_json(value: Any, key: str, example: str) -> Any:
    """``value`` parsed when it is JSON text (a mapping given on the command line), as it is otherwise."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise ConfigError(f"{key} {value!r} is not a JSON object, e.g. '{example}'") from None


@dataclass
class ScriptArguments:
    """Recipe keys that are neither trainer nor model settings."""

    trainer: str = field(default="grpo", metadata={"help": "Trainer name (`rlvr-div list` shows them)."})
    task: str = field(default="arith", metadata={"help": "Task name (`rlvr-div list` shows them)."})
    task_split: str = field(default="train", metadata={"help": "Split of the task used for training."})
    task_size: int | None = field(default=None, metadata={"help": "Use only the first N prompts of the split."})
    task_seed: int = field(default=0, metadata={"help": "Seed of the task builder (synthetic tasks, shuffling)."})
    data_path: str | None = field(
        default=None, metadata={"help": "Data location for tasks that read files (jsonl path, spider directory)."}
    )
    task_options: dict | str | None = field(
        default=None,
        metadata={
            "help": "Options of the task builder, e.g. `{min_target: 2, max_target: 25}` for pairsum (a JSON object on "
            "the command line)."
        },
    )

    def task_kwargs(self) -> dict[str, Any]:
        """The keyword options of the task builder: ``task_options`` (a mapping, or JSON text) plus ``path``."""
        options = _from_json(self.task_options, "task_options", '{"max_target": 25}')
        if options is not None and not isinstance(options, dict):
            raise ConfigError(f"task_options must be a mapping of option names to values, got {options!r}")
        out = dict(options or {})
        if self.data_path:
            if "path" in out:
                raise ConfigError("task_options has a `path` and data_path is set too; give the data location once")
            out["path"] = self.data_path
        return out

    rewards: list[str] | None = field(
        default=None, metadata={"help": "Reward names; default: the task's own reward. Weights: `reward_weights`."}
    )
    reward_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "Settings of the rewards by name, e.g. `{math_accuracy: {fallback: last_number}}` (a JSON object "
            "on the command line); the same settings `rlvr-div eval --reward-arg` takes."
        },
    )

    def reward_settings(self) -> dict[str, dict[str, Any]]:
        """``reward_kwargs`` as a mapping of reward names (each one of the run's rewards) to settings mappings."""
        value = _from_json(self.reward_kwargs, "reward_kwargs", '{"math_accuracy": {"fallback": "last_number"}}') or {}
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            raise ConfigError(
                f"reward_kwargs must map reward names to settings, e.g. {{math_accuracy: {{fallback: last_number}}}}, "
                f"got {value!r}"
            )
        return value

    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file inside model_name_or_path."})
    console_logs: bool = field(
        default=False,
        metadata={
            "help": "Print every log dict to the console, as TRL does (default: only the step bar with the reward; "
            "metrics.jsonl in output_dir always gets every log)."
        },
    )
    threads: int | None = field(
        default=None,
        metadata={
            "help": "torch CPU threads for this process (default: torch's); 1 is much faster on a CPU shared with "
            "other jobs, as `rlvr-div eval --threads`."
        },
    )
    monitor_split: str | None = field(
        default=None,
        metadata={
            "help": "Held-out split of the task (e.g. test, validation) on which pass@k is measured while training, "
            "at step 0, every monitor_steps steps and at the end (logged as monitor/*, counts in monitor.jsonl); "
            "unset: no monitor."
        },
    )
    monitor_size: int | None = field(
        default=None, metadata={"help": "Monitor only the first N problems of monitor_split (default: all)."}
    )
    monitor_n: int = field(default=16, metadata={"help": "Samples per monitored problem (pass@k for k up to it)."})
    monitor_steps: int | None = field(
        default=None,
        metadata={"help": "Measure every N steps (besides step 0 and the last step; default: only those two)."},
    )
    monitor_max_new_tokens: int | None = field(
        default=None, metadata={"help": "Token cap of a monitor sample (default: max_completion_length)."}
    )
    monitor_stop_on_overtake: bool = field(
        default=False,
        metadata={
            "help": "Stop the run (after saving a checkpoint) when the base overtakes the policy on the monitor's "
            "problems: lost_vs_base - gained_vs_base >= monitor_overtake_margin."
        },
    )
    monitor_overtake_margin: int = field(
        default=1, metadata={"help": "Problems by which the base must lead to stop the run (monitor_stop_on_overtake)."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start over in an output_dir that holds an earlier run: delete its checkpoints, metrics, recipe "
            "and saved model first (without this or resume_from_checkpoint, such a run is refused)."
        },
    )


# TRL's (and open-r1's) names for what a recipe here calls otherwise
TRL_NAMES = {
    "dataset_name": "task (a registered task, `rlvr-div list`) or data_path (a local file or directory)",
    "dataset_config": "task_options",
    "dataset_train_split": "task_split",
    "reward_funcs": "rewards",
    "torch_dtype": "dtype",
}


def _unknown_key_hint(key: str) -> str:
    """What to do about an unknown key: TRL's name for one of ours, else where the keys are listed."""
    if key in TRL_NAMES:
        return f"TRL's {key} is {TRL_NAMES[key]} here"
    return "`rlvr-div train --help` lists the keys"


_EXAMPLE_RECIPE = "recipes/tiny/grpo.yaml"


def _read_recipe(argv: list[str]) -> dict[str, Any]:
    """The YAML mapping named by ``--config`` (empty without one); a run's resolved ``recipe.yaml`` is flattened
    back into a recipe (:func:`recipe_from_resolved`)."""
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise ConfigError("--config needs a path to a recipe YAML file")
        data = read_yaml_mapping(Path(argv[i + 1]), "recipe")
        if _RESOLVED_SECTIONS <= set(data) and all(isinstance(data[k], dict) for k in _RESOLVED_SECTIONS):
            return recipe_from_resolved(data)
        return data
    return {}


_RESOLVED_SECTIONS = {"script", "training", "model"}
# derived by GRPOConfig from steps_per_generation (both given is refused): the resolved recipe keeps the latter
_DERIVED_KEYS = ("generation_batch_size",)


def recipe_from_resolved(resolved: dict[str, Any]) -> dict[str, Any]:
    """A run's resolved ``recipe.yaml`` (sections ``script``, ``training``, ``model``, ``launch``, ``history``) as a
    flat recipe that trains the same run: the three sections merged, ``launch`` and ``history`` dropped, values that
    are derived or masked (``generation_batch_size``, the divergence trainer's TRL ``beta``, ``model_init_kwargs``
    filled from the model keys, ``<…TOKEN>`` placeholders) left out."""
    flat: dict[str, Any] = {}
    for section in ("script", "training", "model"):
        flat.update(resolved[section])
    for key in _DERIVED_KEYS:
        if flat.get("steps_per_generation") is not None:
            flat.pop(key, None)
    # the project's GRPO trainers (their config has validity_reward_index) derive TRL's beta from the plug-ins (their
    # reference switch, e.g. a sequence-level KL's coefficient) and keep the user's coefficient in the plug-in's key:
    # read back, the two would disagree
    if "validity_reward_index" in flat:
        flat.pop("beta", None)
    # train.py fills model_init_kwargs from the model keys: keep only what was given beyond them, so that a
    # command-line --dtype (or --model_revision, ...) still applies to the resolved recipe
    derived = {
        "revision": flat.get("model_revision"),
        "trust_remote_code": bool(flat.get("trust_remote_code", False)),
        "attn_implementation": flat.get("attn_implementation"),
        "dtype": flat.get("dtype"),
    }
    if isinstance(flat.get("model_init_kwargs"), dict):
        extra = {k: v for k, v in flat["model_init_kwargs"].items() if k not in derived or derived[k] != v}
        flat["model_init_kwargs"] = extra or None
    return {k: v for k, v in flat.items() if not (isinstance(v, str) and v.startswith("<") and v.endswith("TOKEN>"))}


class _DuplicateKey(Exception):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a mapping key given twice (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping (a recipe, a benchmark config): one-line :class:`ConfigError` for a
    missing or unreadable file, a directory, text that is not UTF-8 (naming the byte's offset), invalid YAML or
    anything but a mapping."""
    if path.is_dir():
        raise ConfigError(f"{what} file {str(path)!r} is a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"{what} file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        byte = e.object[e.start]
        raise ConfigError(
            f"{what} {str(path)!r} is not UTF-8 text: byte 0x{byte:02x} at offset {e.start}; save it as UTF-8"
        ) from None
    except OSError as e:
        raise ConfigError(f"cannot read {what} {str(path)!r} ({e.strerror or e})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {str(path)!r} is not valid YAML: {str(e).splitlines()[0]}") from None
    except _DuplicateKey as e:
        raise ConfigError(
            f"{what} {str(path)!r} sets key {e.args[0]!r} twice (YAML would keep the last silently)"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {str(path)!r} must be a YAML mapping of keys to values")
    return data


def _trainer_name(argv: list[str], recipe: dict[str, Any]) -> str:
    """The trainer named on the command line or in the recipe (it decides the config class)."""
    for i, a in enumerate(argv):
        if a == "--trainer" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--trainer="):
            return a.split("=", 1)[1]
    name = recipe.get("trainer", "grpo")
    if not isinstance(name, str):
        raise ConfigError(f"recipe key trainer={name!r} has the wrong type: it must be a string (a trainer name)")
    return name


class _OneLineParserError(Exception):
    pass


# transformers 5.20+ renamed `gradient_checkpointing*` to `activation_checkpointing*`; recipes use the new names
_CHECKPOINTING_KEYS = {
    "activation_checkpointing": "gradient_checkpointing",
    "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs",
}


def _legacy_flag(arg: str, legacy: dict[str, str]) -> str:
    """``--activation_checkpointing[=v]`` → ``--gradient_checkpointing[=v]`` when only the old field exists."""
    name, sep, value = arg.partition("=")
    if name.startswith("--") and name[2:] in legacy:
        return f"--{legacy[name[2:]]}{sep}{value}"
    return arg


def _given_keys(argv: list[str], recipe: dict[str, Any]) -> list[str]:
    """The keys the user set: the command line's first (they override the recipe's), then the recipe's."""
    cli = [a[2:].partition("=")[0] for a in argv if a.startswith("--")]
    return list(dict.fromkeys([*cli, *recipe]))


def _one_line(message: str) -> str:
    """argparse's message without its ``argument --key/--alias:`` prefix when the rest names the key itself."""
    return re.sub(r"^argument [-\w/]+: (?=\w+=)", "", message)


def _cli_values(argv: list[str]) -> list[tuple[str, str]]:
    """(key, text) for every value on the command line: ``--key value [value ...]`` and ``--key=value`` (a key's
    hyphens read as underscores, as the parser reads them)."""
    out, key = [], None
    for token in argv:
        if token.startswith("--"):
            name, sep, value = token[2:].partition("=")
            key = None if sep else name.replace("-", "_")
            if sep:
                out.append((name.replace("-", "_"), value))
        elif key is not None:
            out.append((key, token))
    return out


def _check_text_values(argv: list[str], recipe: dict[str, Any], classes: tuple[type, ...]) -> dict[str, str]:
    """The values given as text (the command line's, and a recipe's quoted ones), checked before the parser converts
    them: a boolean key takes true/false only (any case; transformers' converter also takes yes/no, 1/0, t/f, y/n,
    which a YAML recipe may not). Returns the number keys given infinity or NaN (key -> the text), so that the
    trainer's own check of the key may speak first (:func:`rlvr_div.preflight.check_finite`)."""
    from rlvr_div.preflight import BOOL_TEXT, field_types, scalar_kinds

    types_ = field_types(*classes)
    given = [(k, v) for k, v in recipe.items() if isinstance(v, str)] + _cli_values(argv)
    non_finite: dict[str, str] = {}
    for key, text in given:
        kinds = scalar_kinds(types_[key]) - {type(None)} if key in types_ else set()
        if kinds == {bool} and text.strip().lower() not in (*BOOL_TEXT, "none", "null"):
            raise ConfigError(f"{key}={text!r} is not a boolean: it must be true or false")
        if float in kinds and kinds <= {float, int}:
            try:
                number = float(text)
            except ValueError:
                continue  # the parser's own converter says so
            if not math.isfinite(number):
                non_finite.setdefault(key, text.strip())
    return non_finite


def _negative_numbers_as_values(argv: list[str], classes: tuple[type, ...]) -> list[str]:
    """``--learning_rate -1e-4`` → the value ``-1e-4``, not an option.

    argparse takes a token that starts with ``-`` for an option unless it looks like ``-1`` or ``-0.5``, so
    ``-1e-4`` after a numeric key fails with "expected one argument". A leading space keeps argparse from reading the
    token as an option, and ``float``/``int`` ignore it. Only tokens that parse as numbers of the key's type (or of a
    numeric list key's items) and follow its key are touched.
    """
    from rlvr_div.preflight import field_types, scalar_kinds

    types_ = field_types(*classes)
    out, convert = [], None
    for token in argv:
        if token.startswith("--"):
            name, sep, _ = token[2:].partition("=")
            kinds = scalar_kinds(types_.get(name.replace("-", "_"), str)) - {type(None)}
            convert = None if sep or not kinds or not kinds <= {int, float} else float if float in kinds else int
        elif convert is not None and token.startswith("-"):
            try:
                convert(token)
            except ValueError:
                pass
            else:
                token = " " + token
        out.append(token)
    return out


def _set_env(recipe: dict[str, Any]) -> None:
    """A recipe's ``env`` mapping into the environment, as TRL's parser does (before the configs are built)."""
    env = recipe.pop("env", None)
    if env is None:
        return
    if not isinstance(env, dict):
        raise ConfigError(f"recipe key env={env!r} must be a mapping of environment variables to values")
    for key, value in env.items():
        os.environ[str(key)] = str(value)


def _parser(classes: tuple[type, ...]) -> Any:
    """TRL's parser for ``classes`` whose errors are one line (argparse's extension point: a subclass's ``error``;
    argparse would print the whole usage and exit)."""
    from trl import TrlParser

    class RecipeParser(TrlParser):
        def error(self, message: str) -> NoReturn:
            raise _OneLineParserError(message)

    return RecipeParser(classes)


def parse_recipe(argv: list[str] | None = None) -> tuple[ScriptArguments, Any, Any]:
    """Parse ``--config recipe.yaml`` plus CLI overrides into (script, training, model) arguments, as TRL's
    ``TrlParser.parse_args_and_config`` does: the recipe's values become the parser's defaults, the command line
    overrides them.

    Every problem raises :class:`ConfigError` with one line: unknown keys (YAML or CLI), bad values, a batch that
    does not hold whole groups of ``num_generations``.
    """
    from trl import ModelConfig

    from rlvr_div import preflight
    from rlvr_div.trainers import TRAINERS

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        raise ConfigError(
            f"no recipe given: pass --config RECIPE.yaml (e.g. {_EXAMPLE_RECIPE}); `rlvr-div train --help` lists "
            "the keys"
        )
    recipe = _read_recipe(argv)
    has_config = "--config" in argv
    if has_config:
        i = argv.index("--config")
        argv = argv[:i] + argv[i + 2 :]
    spec = TRAINERS.get(_trainer_name(argv, recipe))
    classes = (ScriptArguments, spec.config_class(), ModelConfig)
    known = {f.name for cls in classes for f in fields(cls)} | {"env"}
    legacy = {new: old for new, old in _CHECKPOINTING_KEYS.items() if new not in known and old in known}
    if legacy:  # transformers < 5.20 (the vLLM CPU venv): recipe keys `activation_checkpointing*` → old fields
        known |= set(legacy)
        argv = [_legacy_flag(a, legacy) for a in argv]
    for key in recipe:
        if key not in known:
            raise ConfigError(f"unknown recipe key {key!r}; {_unknown_key_hint(key)}")
    preflight.check_recipe_types(recipe, classes)
    non_finite = _check_text_values(argv, recipe, classes)
    _set_env(recipe)
    parser = _parser(classes)
    parser.set_defaults_with_config(**{legacy.get(k, k): v for k, v in recipe.items()})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            script, training, model, from_cli = parser.parse_args_into_dataclasses(
                args=_negative_numbers_as_values(argv, classes), return_remaining_strings=True
            )
    except _OneLineParserError as e:
        raise ConfigError(_one_line(str(e))) from None
    except ValueError as e:  # ConfigError too: a trainer's own check, which may also be about an infinite value
        line = str(e).strip().splitlines()[0]
        if not has_config:  # e.g. TRL's bf16 default on a CPU machine: the recipe would have set it
            line += f" (no recipe was given: pass --config RECIPE.yaml, e.g. {_EXAMPLE_RECIPE})"
        raise ConfigError(line) from None
    except ArithmeticError:  # e.g. TrainingArguments' int(logging_steps) of an infinite value
        cli = _given_keys(argv, {})
        bad = [(k, non_finite[k]) for k in cli if k in non_finite]
        bad += [(k, v) for k, v in recipe.items() if k not in cli and not preflight.is_finite(v)]
        bad += [(k, v) for k, v in non_finite.items() if k not in cli]
        if not bad:
            raise
        raise ConfigError(preflight.not_finite(*bad[0])) from None
    unknown = [s for s in from_cli if s.startswith("--")]
    if unknown:
        key = unknown[0].lstrip("-").partition("=")[0]
        raise ConfigError(f"unknown command line key {key!r}; {_unknown_key_hint(key)}")
    if from_cli:
        raise ConfigError(f"unexpected command-line value {from_cli[0]!r}")
    preflight.check_finite((script, training, model), _given_keys(argv, recipe))
    return script, training, model


def validate(script: ScriptArguments, training: Any, model: Any, check_inputs: bool = True) -> None:
    """Cheap checks that must fail before any model loads; with ``check_inputs``, also the files the active plug-ins
    read (:meth:`GRPOPlugin.check_inputs`: not when a command is about to write them, as ``rlvr-div rehearse``)."""
    from rlvr_div import preflight
    from rlvr_div.models import check_model_settings, resolve_model
    from rlvr_div.models.tiny_base import tiny_spec
    from rlvr_div.rewards import get_reward
    from rlvr_div.rewards.base import check_validity_reward_index
    from rlvr_div.runs.disk_space import check_free_space, checkpoint_bytes
    from rlvr_div.tasks import check_task, task_reward_settings, task_stop_text
    from rlvr_div.trainers.entropy_bonus import check_entropy_bonus
    from rlvr_div.trainers.plugin import active_plugins

    # the training settings' own checks, in one visit to preflight (the model's come once it is resolved, below)
    preflight.check_ranges(script, training, model)
    preflight.check_loss_type(training)
    preflight.check_report_to(training)
    preflight.check_push_to_hub(training)
    plugins = active_plugins(training)
    if script.data_path and not _takes_data_path(script.task):
        readers = ", ".join(name for name in _task_names() if _takes_data_path(name))
        raise ConfigError(f"task {script.task!r} reads no data, so data_path does not apply; tasks that take a "
                          f"data_path: {readers}")  # fmt: skip
    options = script.task_kwargs()
    with relative_path_hint(script.data_path):
        spec = check_task(script.task, **options)
    rewards = script.rewards or [spec.reward]
    settings = script.reward_settings()
    for name in settings:
        if name not in rewards:
            raise ConfigError(f"reward_kwargs names {name!r}, which is not one of the run's rewards {rewards}")
    for name in rewards:  # unknown names and settings fail here, in one line
        get_reward(name, **task_reward_settings(script.task, name, settings.get(name), **options))
    stop = task_stop_text(script.task, **options)
    if stop is not None and getattr(training, "use_vllm", False):
        raise ConfigError(f"task {script.task!r} ends completions at {stop!r}, which rlvr-div applies to HF "
                          "generation only; train it without use_vllm")  # fmt: skip
    if training.reward_weights is not None and len(training.reward_weights) != len(rewards):
        raise ConfigError(f"reward_weights has {len(training.reward_weights)} values for {len(rewards)} rewards")
    check_validity_reward_index(getattr(training, "validity_reward_index", 0), rewards)
    for plugin in plugins:  # the plug-ins' checks against task and rewards
        plugin.check_task(training, script.task, spec, rewards)
    check_entropy_bonus(training)
    adopted = preflight.eval_strategy_as_monitor(script, training)
    if adopted is not None:
        logging.getLogger("rlvr_div.train").info("%s", adopted)
    preflight.check_monitor(script, training)
    # (batches that do not hold whole groups of num_generations are refused by GRPOConfig while parsing)
    check_model_settings(model, training)
    with relative_path_hint(model.model_name_or_path):
        model_path: str | None = resolve_model(model.model_name_or_path or "", script.gguf_file, build=False)
    spec = tiny_spec(model_path)
    if spec is not None:
        model_path = _tiny_dir_if_built(spec)
    elif not Path(model_path).exists():  # a hub id: in the cache, or known to the hub
        preflight.check_hub_model(model_path, model.model_revision, filename=script.gguf_file or "config.json")
    if model_path is not None:
        preflight.check_lora_targets(model, model_path)
    need = checkpoint_bytes(model_path, peft=bool(model.use_peft))
    check_free_space(training.output_dir, "--output_dir", need, "one checkpoint of this run (weights and Adam state)")
    for plugin in plugins if check_inputs else ():
        plugin.check_inputs(script, training, model)


def _task_names() -> list[str]:
    from rlvr_div.tasks import TASKS

    return TASKS.names()


def _takes_data_path(task: str) -> bool:
    """Whether task ``task`` reads data from a ``path`` option (its pre-load ``check`` takes one)."""
    from rlvr_div.tasks import get_task_spec

    check = get_task_spec(task).check
    return check is not None and "path" in inspect.signature(check).parameters


def _tiny_dir_if_built(spec: Any) -> str | None:
    """A named tiny base's directory (``spec``: its TinySpec) if it is already built and current (checks never build
    it)."""
    from rlvr_div.models.tiny_base import cached_tiny_path

    path = cached_tiny_path(spec)
    return None if path is None else str(path)
