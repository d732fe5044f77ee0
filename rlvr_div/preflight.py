"""Pre-load checks that need more than a name lookup: value ranges, value types (number keys take finite numbers,
boolean keys true or false, from YAML and the command line alike), TRL's loss types, held-out evaluation (the
monitor's keys, TRL's eval_strategy), the model's hub id and module names, logging backends and hub access.

:func:`rlvr_div.recipe.validate` calls these before any model loads; each failure is one :class:`ConfigError` line
that names the key, the bad value and what is accepted. Nothing here downloads or loads weights: a hub id is looked
up in the local cache first and then with one metadata request (short timeout, no retries); LoRA target names are
matched against a model built on the meta device from its ``config.json``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import (
    AT_LEAST_ONE,
    HALF_OPEN_UNIT,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    UNIT,
    Range,
)

HUB_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------------------------- value ranges


# The settings users touch that belong to TRL, transformers, the task or LoRA, by key (a key the trainer's config does
# not have is skipped; None means "unset"). A plug-in declares its own keys' ranges (``GRPOPlugin.ranges``), enforced
# by :meth:`rlvr_div.trainers.plugin.GRPOPlugin.check_declared`.
# max_steps is special: -1 is TRL's "train num_train_epochs epochs" (see check_ranges).
RANGES: dict[str, Range] = {
    # optimisation
    "learning_rate": POSITIVE,
    "beta": NON_NEGATIVE,  # TRL's KL coefficient, in every trainer (a negative one rewards moving away from the base)
    "num_train_epochs": POSITIVE,
    "weight_decay": NON_NEGATIVE,
    "max_grad_norm": NON_NEGATIVE,
    "adam_beta1": HALF_OPEN_UNIT,
    "adam_beta2": HALF_OPEN_UNIT,
    "adam_epsilon": POSITIVE,
    "seed": NON_NEGATIVE,
    # batches and steps
    "per_device_train_batch_size": AT_LEAST_ONE,
    "per_device_eval_batch_size": AT_LEAST_ONE,
    "gradient_accumulation_steps": AT_LEAST_ONE,
    "steps_per_generation": AT_LEAST_ONE,
    "generation_batch_size": AT_LEAST_ONE,
    "num_iterations": AT_LEAST_ONE,
    "logging_steps": POSITIVE,
    "save_steps": POSITIVE,
    "eval_steps": POSITIVE,
    "save_total_limit": AT_LEAST_ONE,
    "task_size": AT_LEAST_ONE,
    "threads": AT_LEAST_ONE,
    "monitor_size": AT_LEAST_ONE,
    "monitor_n": AT_LEAST_ONE,
    "monitor_steps": AT_LEAST_ONE,
    "monitor_max_new_tokens": AT_LEAST_ONE,
    "monitor_overtake_margin": AT_LEAST_ONE,
    # sampling and generation lengths
    "temperature": POSITIVE,
    "top_p": PROBABILITY,
    "top_k": NON_NEGATIVE,
    "min_p": UNIT,
    "repetition_penalty": POSITIVE,
    "max_completion_length": AT_LEAST_ONE,
    "max_prompt_length": AT_LEAST_ONE,
    "vllm_max_model_length": AT_LEAST_ONE,
    "vllm_gpu_memory_utilization": PROBABILITY,
    # GRPO loss
    "epsilon": POSITIVE,
    "epsilon_high": POSITIVE,
    "top_entropy_quantile": UNIT,
    # LoRA
    "lora_r": AT_LEAST_ONE,
    "lora_alpha": POSITIVE,
    "lora_dropout": HALF_OPEN_UNIT,
}


# keys that GRPOConfig derives from others when they are not given
_DERIVED = {
    "steps_per_generation": " (default: gradient_accumulation_steps)",
    "generation_batch_size": " (= per_device_train_batch_size x processes x steps_per_generation when not given)",
}


def check_ranges(*configs: Any) -> None:
    """Every key of :data:`RANGES` that one of ``configs`` holds (and is not None) lies in its range.

    ``max_steps`` must be ``>= 1``, or ``-1``: TRL's sentinel for "train ``num_train_epochs`` epochs". Any other
    value is refused (transformers would treat ``max_steps=-5`` like ``-1`` and train three epochs).
    """
    for config in configs:
        for key, allowed in RANGES.items():
            value = getattr(config, key, None)
            if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if value not in allowed:
                raise ConfigError(f"{key}={value} is out of range: it must be {allowed}{_DERIVED.get(key, '')}")
        steps = getattr(config, "max_steps", None)
        if steps is not None and steps != -1 and steps < 1:
            raise ConfigError(f"max_steps={steps} is out of range: give a number of steps >= 1, or -1 to train "
                              f"num_train_epochs epochs")  # fmt: skip


def check_vllm(training: Any) -> None:
    """``use_vllm=true`` needs an importable vLLM (TRL would fail with ModuleNotFoundError after the model loads)."""
    if not getattr(training, "use_vllm", False):
        return
    from rlvr_div.sampling import vllm_available

    if not vllm_available():
        raise ConfigError(
            'use_vllm=true needs the vllm package, which is not importable here: `pip install -e ".[vllm]"` '
            "(or the CPU build, see `make test-vllm`), or train with --use_vllm false"
        )


def trl_loss_types(config_class: type) -> tuple[str, ...]:
    """The ``loss_type`` values the installed TRL accepts, read from ``config_class`` (GRPOConfig or a subclass): the
    field's ``Literal`` values or argparse ``choices`` when it has them, else the quoted names in the "Supported values
    are ..." sentence of its help text. Empty when none of these can be read (the check is then left to TRL)."""
    found = {f.name: f for f in dataclasses.fields(config_class)}.get("loss_type")
    if found is None:
        return ()
    tp = field_types(config_class).get("loss_type")
    if typing.get_origin(tp) is typing.Literal:
        return tuple(typing.get_args(tp))
    if found.metadata.get("choices"):
        return tuple(found.metadata["choices"])
    sentence = re.search(r"Supported values are:?\s*(.*?)\.(?:\s|$)", found.metadata.get("help", ""), re.DOTALL)
    return tuple(dict.fromkeys(re.findall(r"'([^'\s]+)'", sentence.group(1)))) if sentence else ()


def check_loss_type(training: Any) -> None:
    """``loss_type`` is one TRL knows (TRL checks it only in the first loss computation, after the model loaded and
    the run's ``recipe.yaml`` was written)."""
    value = getattr(training, "loss_type", None)
    accepted = trl_loss_types(type(training)) if value is not None else ()
    if accepted and value not in accepted:
        raise ConfigError(f"loss_type={value!r} is not one of TRL's loss types: {', '.join(accepted)}")


# --------------------------------------------------------------------------------------------- held-out evaluation


def eval_strategy_as_monitor(script: Any, training: Any) -> str | None:
    """TRL's ``eval_strategy: steps`` with ``eval_steps`` turns the monitor on (:mod:`rlvr_div.monitor`):
    ``monitor_steps`` = ``eval_steps`` (a fraction < 1 of ``max_steps`` rounded up), ``monitor_split`` = the task's
    ``validation`` split when it has one, else ``test`` (a ``monitor_*`` key given wins), and ``eval_strategy`` is set
    back to ``no``, so that transformers' Trainer does not run its own evaluate(), which needs an eval_dataset
    ``rlvr-div train`` does not build. Returns the line that says so, or None when ``eval_strategy`` is ``no``; another
    strategy (``epoch``) is one line."""
    from transformers.trainer_utils import IntervalStrategy

    from rlvr_div.tasks import get_task

    strategy = getattr(training.eval_strategy, "value", training.eval_strategy)
    if strategy in (None, "no"):
        return None
    if strategy != "steps":
        raise ConfigError(
            f"eval_strategy={strategy} is not supported: held-out pass@k while training runs every N steps "
            "(--eval_strategy steps --eval_steps N, or --monitor_split test --monitor_steps N; docs/recipes.md, "
            "'Held-out pass@k while training')"
        )
    steps = training.eval_steps
    if steps is not None and 0 < steps < 1:  # transformers' ratio of the run's steps
        if training.max_steps <= 0:
            raise ConfigError(f"eval_steps={steps} is a fraction of max_steps, which is not set; give a step count")
        steps = math.ceil(steps * training.max_steps)
    if script.monitor_steps is None:
        script.monitor_steps = int(steps)
    if script.monitor_split is None:
        try:
            get_task(script.task, split="validation", seed=script.task_seed, **script.task_kwargs())
            script.monitor_split = "validation"
        except ConfigError:  # the task has no validation split
            script.monitor_split = "test"
    training.eval_strategy = IntervalStrategy.NO
    training.do_eval = False
    return (
        f"eval_strategy=steps: held-out pass@k by the monitor on split {script.monitor_split!r} every "
        f"{script.monitor_steps} steps (monitor_split, monitor_steps); transformers' own evaluation is off "
        "(eval_strategy=no)"
    )


def check_monitor(script: Any, training: Any) -> None:
    """Held-out evaluation while training is the monitor's (:mod:`rlvr_div.monitor`; TRL's ``eval_strategy`` is
    translated into its keys first, :func:`eval_strategy_as_monitor`): a ``monitor_*`` key set without
    ``monitor_split`` would not act, nor ``monitor_overtake_margin`` without ``monitor_stop_on_overtake``; a
    ``monitor_split`` that reads the training data (:func:`rlvr_div.tasks.data_source`) is not held out. (The number
    keys' ranges are in :data:`RANGES`; a split the task does not have is refused by its builder, before the load.)"""
    from rlvr_div.tasks import data_source

    if script.monitor_split is None:
        for f in dataclasses.fields(script):
            value = getattr(script, f.name)
            if f.name.startswith("monitor_") and f.name != "monitor_split" and value != f.default:
                raise ConfigError(
                    f"{f.name}={value} acts only with monitor_split (the held-out split of task {script.task!r} to "
                    "measure pass@k on while training, e.g. --monitor_split test)"
                )
        return
    if not script.monitor_stop_on_overtake and script.monitor_overtake_margin != 1:
        raise ConfigError(
            f"monitor_overtake_margin={script.monitor_overtake_margin} acts only with monitor_stop_on_overtake: true"
        )
    options = script.task_kwargs()
    held_out = data_source(script.task, script.monitor_split, **options)
    if held_out == data_source(script.task, script.task_split, **options):
        raise ConfigError(
            f"monitor_split={script.monitor_split} reads the training data ({held_out}), so it is not held out; "
            "choose another split of the task (e.g. test or validation)"
        )


# --------------------------------------------------------------------------------------------- value types


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    return typing.get_args(tp) if origin is typing.Union or origin is types.UnionType else None


BOOL_TEXT = ("true", "false")  # the text a boolean key takes (any case), on the command line or quoted in YAML


def accepts(value: Any, tp: Any, text_converts: bool = False) -> bool:
    """Whether ``value`` (from YAML) is of type ``tp`` (a field annotation). ``text_converts``: a string is also
    accepted where the command-line parser converts it (int and float scalars: YAML reads ``1e-4`` as text; bool: only
    ``true``/``false``, any case)."""
    if tp is Any or tp is object:
        return True
    union = _union_args(tp)
    if union is not None:
        return any(accepts(value, a, text_converts) for a in union)
    if tp is type(None):
        return value is None
    if isinstance(value, str) and text_converts and tp is bool:
        return value.lower() in BOOL_TEXT  # as the command line: true or false, not yes/1/on
    if isinstance(value, str) and text_converts and tp in (int, float):
        return True
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if tp in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return isinstance(value, (list, tuple)) and all(accepts(v, inner) for v in value)
    if tp is dict or origin is dict:
        return isinstance(value, dict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, tp) or value in [m.value for m in tp]
    if isinstance(tp, type):
        return isinstance(value, tp)  # a config object: nothing YAML writes is one
    return True  # an annotation this check does not know: left to the class itself


def describe_type(tp: Any) -> str:
    """``list[str] | None`` → "a list of strings, or null"."""
    union = _union_args(tp)
    if union is not None:
        parts = [describe_type(a) for a in union if a is not type(None)]
        return " or ".join(dict.fromkeys(parts)) + (", or null" if type(None) in union else "")
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", dict: "a mapping"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    if tp in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        args = typing.get_args(tp)
        inner = {str: "strings", int: "whole numbers", float: "numbers"}.get(args[0] if args else None, "values")
        return f"a list of {inner}"
    if origin is dict:
        return "a mapping"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    return getattr(tp, "__name__", str(tp))


def field_types(*classes: type) -> dict[str, Any]:
    """The annotated type of every field of the dataclasses ``classes`` (the first class that has a key wins)."""
    out: dict[str, Any] = {}
    for cls in classes:
        hints: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):  # base classes first: a subclass whose annotations do not resolve
            try:  # here leaves its bases' fields checked
                hints.update(typing.get_type_hints(klass))
            except Exception:
                continue
        for f in dataclasses.fields(cls):
            out.setdefault(f.name, hints.get(f.name, Any))
    return out


# list-typed keys whose consumer also reads one string (peft: "all-linear", or a regular expression of module names)
TEXT_FOR_LIST = frozenset({"lora_target_modules"})


def check_recipe_types(recipe: dict[str, Any], classes: tuple[type, ...], where: str = "recipe") -> None:
    """Every value of a recipe mapping has its field's type, before the parser and the classes see it (a YAML value
    is not converted by the command-line parser, so ``max_steps: 5.5`` or ``rewards: arith_exact`` would reach the
    trainer and fail there, after the model loaded)."""
    types_ = field_types(*classes)
    for key, value in recipe.items():
        tp = types_.get(key)
        if tp is None or accepts(value, tp, text_converts=True):
            continue
        if key in TEXT_FOR_LIST and isinstance(value, str):
            continue
        hint = ""
        if isinstance(value, str) and accepts([value], tp):
            hint = f" (a list: [{value}])"
        raise ConfigError(f"{where} key {key}={value!r} has the wrong type: it must be {describe_type(tp)}{hint}")


def is_finite(value: Any) -> bool:
    """False for infinity or NaN, or a list holding one; True for anything else."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return not any(isinstance(x, float) and not math.isfinite(x) for x in values)


def not_finite(key: str, value: Any) -> str:
    """The complaint about a number key set to infinity or NaN (its range, when it has one; a plug-in's own keys are
    checked against their declared ranges while the config is built, before this runs)."""
    if key in RANGES:
        return f"{key}={value} is out of range: it must be {RANGES[key]} (a finite number)"
    return f"{key} must be a finite number, got {value}"


def check_finite(configs: tuple[Any, ...], given: list[str]) -> None:
    """No field of ``configs`` (the parsed recipe) is infinity or NaN. A trainer's own check of its key runs first
    (while the configs are built) and says more; this one covers every other number key of every trainer. When a
    given key resolved into others (``divergence_coef`` into ``beta``), the key named is the one ``given`` (the keys
    the user set, in the order to prefer)."""
    bad: dict[str, Any] = {}
    for config in configs:
        for f in dataclasses.fields(config):
            value = getattr(config, f.name, None)
            if not is_finite(value):
                bad.setdefault(f.name, value)
    if bad:
        key = next((k for k in given if k in bad), next(iter(bad)))
        raise ConfigError(not_finite(key, bad[key]))


def scalar_kinds(tp: Any) -> set[Any]:
    """The scalar types a field annotation admits (``float | None`` -> {float, NoneType}; lists: their items')."""
    union = _union_args(tp)
    if union is not None:
        return set().union(*(scalar_kinds(a) for a in union))
    origin = typing.get_origin(tp)
    if tp in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        args = typing.get_args(tp)
        return scalar_kinds(args[0]) if args else {Any}
    return {tp}


# --------------------------------------------------------------------------------------------- hub ids


def hub_offline() -> bool:
    """Whether the Hugging Face Hub must not be contacted (``HF_HUB_OFFLINE``, read as huggingface_hub reads it)."""
    from huggingface_hub import constants

    return bool(constants.is_offline_mode()) if hasattr(constants, "is_offline_mode") else constants.HF_HUB_OFFLINE


def _hub_error(e: BaseException) -> str:
    """A short name for a failed hub request (the exception's first line, without the URL noise)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:120]}" if text else type(e).__name__


def check_hub_model(repo_id: str, revision: str | None = None, filename: str = "config.json") -> None:
    """A model reference that is not a local path must be a model on the Hugging Face Hub.

    Found in the local cache: accepted without a request. Otherwise, with ``HF_HUB_OFFLINE`` set: refused; online:
    one metadata request (``HfApi.model_info``, timeout :data:`HUB_TIMEOUT_S`, no retries) decides.
    """
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        cached = try_to_load_from_cache(repo_id, filename, revision=revision)
    except (HFValidationError, ValueError):
        raise ConfigError(
            f"model {repo_id!r} is neither a local path nor a valid Hugging Face Hub id (org/name)"
        ) from None
    if isinstance(cached, str):
        return
    if hub_offline():
        raise ConfigError(
            f"model {repo_id!r} is not a local path and not in the Hugging Face cache, and HF_HUB_OFFLINE is set: "
            "download it first, pass a local directory, or unset HF_HUB_OFFLINE"
        )
    try:
        HfApi().model_info(repo_id, revision=revision, timeout=HUB_TIMEOUT_S)
    except RevisionNotFoundError:
        raise ConfigError(f"model {repo_id!r} has no revision {revision!r} on the Hugging Face Hub") from None
    except RepositoryNotFoundError:
        raise ConfigError(
            f"model {repo_id!r} is neither a local path nor a model on the Hugging Face Hub "
            "(check the id; a private model needs `hf auth login`)"
        ) from None
    except Exception as e:  # network errors come from httpx/requests/OSError depending on the hub client version
        raise ConfigError(
            f"cannot reach the Hugging Face Hub to find model {repo_id!r} ({_hub_error(e)}), and it is not in the "
            "local cache: check the network, pass a local directory, or set HF_HUB_OFFLINE=1 for cached models"
        ) from None


def check_push_to_hub(training: Any) -> None:
    """``push_to_hub`` needs the hub (not offline, reachable within :data:`HUB_TIMEOUT_S`) and a token."""
    if not getattr(training, "push_to_hub", False):
        return
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import get_session

    if hub_offline():
        raise ConfigError("push_to_hub=true needs the Hugging Face Hub, but HF_HUB_OFFLINE is set")
    try:
        get_session().get(constants.ENDPOINT + "/api/models", params={"limit": 1}, timeout=HUB_TIMEOUT_S)
    except Exception as e:
        raise ConfigError(
            f"push_to_hub=true but the Hugging Face Hub cannot be reached ({_hub_error(e)}): check the network, "
            "or train with --push_to_hub false and upload later with `hf upload`"
        ) from None
    if getattr(training, "hub_token", None) is None and get_token() is None:
        raise ConfigError("push_to_hub=true needs a Hugging Face token: run `hf auth login` or set HF_TOKEN")


# --------------------------------------------------------------------------------------------- logging backends

# report_to name -> (transformers' availability function, what to install). Extras exist for the two common ones.
BACKENDS: dict[str, tuple[str, str]] = {
    "tensorboard": ("is_tensorboard_available", "pip install -e '.[tensorboard]' in the rlvr-div clone"),
    "wandb": ("is_wandb_available", "pip install -e '.[wandb]' in the rlvr-div clone"),
    "trackio": ("is_trackio_available", "pip install trackio"),
    "mlflow": ("is_mlflow_available", "pip install mlflow"),
    "comet_ml": ("is_comet_available", "pip install comet-ml, and set COMET_API_KEY"),
    "clearml": ("is_clearml_available", "pip install clearml"),
    "azure_ml": ("is_azureml_available", "pip install azureml-core"),
    "neptune": ("is_neptune_available", "pip install neptune"),
    "codecarbon": ("is_codecarbon_available", "pip install codecarbon"),
    "dagshub": ("is_dagshub_available", "pip install dagshub mlflow"),
    "dvclive": ("is_dvclive_available", "pip install dvclive"),
    "swanlab": ("is_swanlab_available", "pip install swanlab"),
    "flyte": ("is_flyte_deck_standard_available", "pip install flytekit flytekitplugins-deck-standard"),
    "kubeflow": ("is_kubeflow_available", "set KUBEFLOW_TRAINER_SERVER_URL"),
}  # fmt: skip


def check_report_to(training: Any) -> None:
    """Every ``report_to`` backend is known to transformers and importable now (not after the model has loaded)."""
    from transformers.integrations import integration_utils

    names = training.report_to if isinstance(training.report_to, (list, tuple)) else [training.report_to]
    for name in names:
        if name in (None, "none", "all"):
            continue
        if name not in BACKENDS:
            raise ConfigError(f"unknown report_to backend {name!r}; known: none, all, {', '.join(sorted(BACKENDS))}")
        available, install = BACKENDS[name]
        if not getattr(integration_utils, available)():
            raise ConfigError(f"report_to={name} but {name} is not installed: {install}")


# --------------------------------------------------------------------------------------------- LoRA targets

# Layer types peft's LoRA can wrap (a target naming anything else is refused by peft after the load).
_LORA_LAYERS = ("Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "Conv1D", "MultiheadAttention")


def local_config_dir(model_path: str, revision: str | None = None) -> str | None:
    """A directory holding the model's ``config.json`` without a download: the local model directory, or the hub
    cache's snapshot (None when neither has it)."""
    p = Path(model_path).expanduser()
    if (p / "config.json").is_file():
        return str(p)
    if p.exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_path, "config.json", revision=revision)
    except Exception:
        return None
    return str(Path(cached).parent) if isinstance(cached, str) else None


def module_names(config_dir: str) -> dict[str, str] | None:
    """Every module of the model in ``config_dir`` (name -> class name), built on the meta device from its
    ``config.json`` (no weights are read). None when the architecture cannot be built this way (remote code)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(config_dir)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:
        return None
    return {name: type(module).__name__ for name, module in model.named_modules() if name}


def check_lora_targets(model_args: Any, model_path: str) -> None:
    """Each name in ``lora_target_modules`` matches a LoRA-capable layer of the model (peft's rule: a module whose
    name equals the target or ends with ``.<target>``). ``all-linear`` always matches. Skipped when the model's
    config is not on disk (a hub model not yet downloaded): then a mismatch is reported after the load, in one line.
    """
    targets = getattr(model_args, "lora_target_modules", None)
    if not getattr(model_args, "use_peft", False) or not targets:
        return
    targets = [targets] if isinstance(targets, str) else list(targets)
    if targets == ["all-linear"]:
        return
    if "all-linear" in targets:
        raise ConfigError(f"lora_target_modules={targets}: all-linear must be given alone")
    config_dir = local_config_dir(model_path, getattr(model_args, "model_revision", None))
    modules = module_names(config_dir) if config_dir else None
    if modules is None:
        return
    layers = sorted({n.rsplit(".", 1)[-1] for n, cls in modules.items() if cls == "Linear" and n != "lm_head"})
    for target in targets:
        hits = [cls for name, cls in modules.items() if name == target or name.endswith("." + target)]
        if not hits:
            raise ConfigError(
                f"lora_target_modules: {target!r} matches no module of {model_args.model_name_or_path}; its linear "
                f"layers are {', '.join(layers)} (or use all-linear)"
            )
        wrong = sorted({cls for cls in hits if cls not in _LORA_LAYERS})
        if wrong:
            raise ConfigError(
                f"lora_target_modules: {target!r} names {', '.join(wrong)} modules, which LoRA cannot wrap; "
                f"name linear layers instead: {', '.join(layers)} (or all-linear)"
            )


def lora_error_line(e: BaseException, model_args: Any) -> str:
    """peft's error for LoRA targets that match nothing (raised after the load), as one line."""
    targets = getattr(model_args, "lora_target_modules", None)
    if "is not supported" in str(e):  # peft puts the module's multi-line repr in this message
        return (
            f"lora_target_modules={targets}: a target names a module LoRA cannot wrap (only Linear, Embedding, Conv "
            "and MultiheadAttention layers); name linear layers or use all-linear"
        )
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"lora_target_modules={targets}: {first}"


def is_lora_target_error(e: BaseException) -> bool:
    """Whether ``e`` is peft refusing the LoRA targets (no module matched, or a matched module it cannot wrap)."""
    try:
        from peft.utils.error import NoMatchingPeftModuleError
    except ImportError:  # older peft
        NoMatchingPeftModuleError = ()  # type: ignore[assignment]  # noqa: N806
    if NoMatchingPeftModuleError and isinstance(e, NoMatchingPeftModuleError):
        return True
    text = str(e)
    return isinstance(e, ValueError) and ("Target modules" in text or "Target module" in text)
