"""Reading a recipe the TRL way: ``--config recipe.yaml`` plus command-line overrides, parsed by TRL's ``TrlParser``
into (:class:`~rlvr_div.recipe.keys.ScriptArguments`, the trainer's config class, ``trl.ModelConfig``). The recipe's
values become the parser's defaults and the command line overrides them, as in TRL; what TRL would accept silently or
report with a whole usage screen (an unknown key, a value of the wrong type, a key given twice, a boolean given as
``yes``, infinity) is one :class:`ConfigError` line first."""

from __future__ import annotations

import math
import os
import re
import sys
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn

import yaml

from rlvr_div.errors import ConfigError
from rlvr_div.recipe.checks import check_finite, check_vllm, is_finite, not_finite, validate
from rlvr_div.recipe.keys import ScriptArguments
from rlvr_div.recipe.value_types import BOOL_TEXT, check_recipe_types, field_types, scalar_kinds
from rlvr_div.run_dir import RESOLVED_SECTIONS, recipe_from_resolved

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
        if RESOLVED_SECTIONS <= set(data) and all(isinstance(data[k], dict) for k in RESOLVED_SECTIONS):
            return recipe_from_resolved(data)
        return data
    return {}


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


def _check_text_values(argv: list[str], recipe: dict[str, Any], types_: dict[str, Any]) -> dict[str, str]:
    """The values given as text (the command line's, and a recipe's quoted ones), checked before the parser converts
    them: a boolean key takes true/false only (any case; transformers' converter also takes yes/no, 1/0, t/f, y/n,
    which a YAML recipe may not). Returns the number keys given infinity or NaN (key -> the text), so that the
    trainer's own check of the key may speak first (:func:`rlvr_div.recipe.checks.check_finite`); ``types_``: the
    config classes' field types."""
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


def _negative_numbers_as_values(argv: list[str], types_: dict[str, Any]) -> list[str]:
    """``--learning_rate -1e-4`` → the value ``-1e-4``, not an option.

    argparse takes a token that starts with ``-`` for an option unless it looks like ``-1`` or ``-0.5``, so
    ``-1e-4`` after a numeric key fails with "expected one argument". A leading space keeps argparse from reading the
    token as an option, and ``float``/``int`` ignore it. Only tokens that parse as numbers of the key's type (or of a
    numeric list key's items) and follow its key are touched (``types_``: the config classes' field types).
    """
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
    types_ = field_types(*classes)  # read once: the annotations of every base class
    check_recipe_types(recipe, types_)
    non_finite = _check_text_values(argv, recipe, types_)
    _set_env(recipe)
    parser = _parser(classes)
    parser.set_defaults_with_config(**{legacy.get(k, k): v for k, v in recipe.items()})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            script, training, model, from_cli = parser.parse_args_into_dataclasses(
                args=_negative_numbers_as_values(argv, types_), return_remaining_strings=True
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
        bad += [(k, v) for k, v in recipe.items() if k not in cli and not is_finite(v)]
        bad += [(k, v) for k, v in non_finite.items() if k not in cli]
        if not bad:
            raise
        raise ConfigError(not_finite(*bad[0])) from None
    unknown = [s for s in from_cli if s.startswith("--")]
    if unknown:
        key = unknown[0].lstrip("-").partition("=")[0]
        raise ConfigError(f"unknown command line key {key!r}; {_unknown_key_hint(key)}")
    if from_cli:
        raise ConfigError(f"unexpected command-line value {from_cli[0]!r}")
    check_finite((script, training, model), _given_keys(argv, recipe))
    return script, training, model


def load_recipe(argv: list[str] | None = None) -> tuple[ScriptArguments, Any, Any]:
    """A training run's recipe: parsed (:func:`parse_recipe`), checked before any model loads
    (:func:`~rlvr_div.recipe.checks.validate`), and vLLM importable where it asks for it (not in ``validate``: recipes
    for vLLM machines still validate where vLLM is absent)."""
    script, training, model = parse_recipe(argv)
    validate(script, training, model)
    check_vllm(training)
    return script, training, model
