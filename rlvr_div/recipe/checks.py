"""The checks a recipe passes before any model loads (:func:`validate`): value ranges (:data:`RANGES`), finite
numbers, TRL's loss types, held-out evaluation (the monitor's keys, TRL's eval_strategy), the task and its rewards,
the model (its reference, settings and LoRA targets: :mod:`rlvr_div.models`), logging backends, hub access, disk space
and the active plug-ins' own checks. Each failure is one :class:`ConfigError` line that names the key, the bad value
and what is accepted. Nothing here downloads or loads weights.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import re
import typing
from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError, relative_path_hint
from rlvr_div.ranges import (
    AT_LEAST_ONE,
    HALF_OPEN_UNIT,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    UNIT,
    Range,
)
from rlvr_div.recipe.keys import ScriptArguments
from rlvr_div.recipe.value_types import field_types

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
            get_task(script.task, split="validation", seed=script.task_seed, **script.task_kwargs)
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
    options = script.task_kwargs
    held_out = data_source(script.task, script.monitor_split, **options)
    if held_out == data_source(script.task, script.task_split, **options):
        raise ConfigError(
            f"monitor_split={script.monitor_split} reads the training data ({held_out}), so it is not held out; "
            "choose another split of the task (e.g. test or validation)"
        )


# --------------------------------------------------------------------------------------------- finite numbers


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


def check_push_to_hub(training: Any) -> None:
    """``push_to_hub`` needs the hub (not offline, reachable within :data:`HUB_TIMEOUT_S`) and a token."""
    if not getattr(training, "push_to_hub", False):
        return
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import get_session

    from rlvr_div.models.hub import HUB_TIMEOUT_S, hub_error, hub_offline

    if hub_offline():
        raise ConfigError("push_to_hub=true needs the Hugging Face Hub, but HF_HUB_OFFLINE is set")
    try:
        get_session().get(constants.ENDPOINT + "/api/models", params={"limit": 1}, timeout=HUB_TIMEOUT_S)
    except Exception as e:
        raise ConfigError(
            f"push_to_hub=true but the Hugging Face Hub cannot be reached ({hub_error(e)}): check the network, "
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


# --------------------------------------------------------------------------------------------- the whole recipe


def validate(script: ScriptArguments, training: Any, model: Any, check_inputs: bool = True) -> None:
    """Cheap checks that must fail before any model loads; with ``check_inputs``, also the files the active plug-ins
    read (:meth:`GRPOPlugin.check_inputs`: not when a command is about to write them, as ``rlvr-div rehearse``)."""
    from rlvr_div.models import check_model_settings, resolve_model
    from rlvr_div.models.hub import check_hub_model
    from rlvr_div.models.lora_targets import check_lora_targets
    from rlvr_div.models.tiny_base import tiny_spec
    from rlvr_div.rewards import get_reward
    from rlvr_div.rewards.base import check_validity_reward_index
    from rlvr_div.runs.disk_space import check_free_space, checkpoint_bytes
    from rlvr_div.tasks import check_task, task_reward_settings, task_stop_text
    from rlvr_div.trainers.entropy_bonus import check_entropy_bonus
    from rlvr_div.trainers.plugin import active_plugins

    # the training settings' own checks, in one visit to preflight (the model's come once it is resolved, below)
    check_ranges(script, training, model)
    check_loss_type(training)
    check_report_to(training)
    check_push_to_hub(training)
    plugins = active_plugins(training)
    if script.data_path and not _takes_data_path(script.task):
        readers = ", ".join(name for name in _task_names() if _takes_data_path(name))
        raise ConfigError(f"task {script.task!r} reads no data, so data_path does not apply; tasks that take a "
                          f"data_path: {readers}")  # fmt: skip
    options = script.task_kwargs
    with relative_path_hint(script.data_path):
        spec = check_task(script.task, **options)
    rewards = script.rewards or [spec.reward]
    settings = script.reward_settings
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
    adopted = eval_strategy_as_monitor(script, training)
    if adopted is not None:
        logging.getLogger("rlvr_div.train").info("%s", adopted)
    check_monitor(script, training)
    # (batches that do not hold whole groups of num_generations are refused by GRPOConfig while parsing)
    check_model_settings(model, training)
    with relative_path_hint(model.model_name_or_path):
        model_path: str | None = resolve_model(model.model_name_or_path or "", script.gguf_file, build=False)
    spec = tiny_spec(model_path)
    if spec is not None:
        model_path = _tiny_dir_if_built(spec)
    elif not Path(model_path).exists():  # a hub id: in the cache, or known to the hub
        check_hub_model(model_path, model.model_revision, filename=script.gguf_file or "config.json")
    if model_path is not None:
        check_lora_targets(model, model_path)
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
