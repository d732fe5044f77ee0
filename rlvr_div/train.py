"""``rlvr-div train --config recipe.yaml [--key value ...]`` and ``accelerate launch -m rlvr_div.train --config ...``.

Reads top to bottom: read and check the recipe before any model loads (:func:`rlvr_div.recipe.load_recipe`); decide
how the run starts in its ``output_dir`` (new, ``--resume_from_checkpoint true`` or ``--overwrite_output_dir true``;
an earlier run is never silently appended to, and a run that failed before its first checkpoint is started again by
the same command: :mod:`rlvr_div.run_dir`; a second run on the same ``output_dir`` while the first holds its lock
stops in one line naming the first's PID: :mod:`rlvr_div.runs.run_lock`); build the task dataset and reward functions
by name; run the trainer; save the model or adapter, the resolved recipe, and ``metrics.jsonl`` (one line per logging
step, each step once). Ctrl-C stops with one line naming the last checkpoint and the command that resumes from it.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import sys
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlvr_div.cpu_bf16 import training_compute
from rlvr_div.errors import ConfigError
from rlvr_div.recipe.keys import ScriptArguments
from rlvr_div.recipe.parse import load_recipe
from rlvr_div.run_dir import METRICS, apply_start, last_complete_checkpoint, plan_start, write_resolved_recipe
from rlvr_div.runs.disk_space import free_bytes, out_of_space
from rlvr_div.runs.resume_order import epoch_replay
from rlvr_div.runs.run_lock import directory_lock
from rlvr_div.trainers.trl_seam import colocated_vllm_on_cpu, end_completions_at, tied_weights_are_not_missing

logger = logging.getLogger("rlvr_div.train")


def metrics_callback(path: str | os.PathLike) -> Any:
    """A ``TrainerCallback`` that appends every log dict to ``path`` as one JSON line (main process only).

    The end-of-training summary (``train_runtime``, ``train_loss``, ...) is not a step: it goes to the final
    ``trainer_state.json`` (``log_history``), so ``metrics.jsonl`` holds each step once."""
    from transformers import TrainerCallback

    class MetricsFile(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            if state.is_world_process_zero and logs and "train_runtime" not in logs:
                with open(path, "a") as f:
                    f.write(json.dumps({"step": state.global_step, **logs}) + "\n")

    return MetricsFile()


def check_prompts_per_step(n_prompts: int, training: Any) -> None:
    """One-line error when the training set holds fewer distinct prompts than one generation batch needs: TRL's
    sampler would then yield no batch at all and the run would "finish" after 0 steps."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_batch = training.per_device_train_batch_size * world * training.steps_per_generation
    needed = per_batch // training.num_generations
    if n_prompts < needed:
        raise ConfigError(
            f"the training set has {n_prompts} prompts but one step samples {needed} distinct prompts "
            f"(per_device_train_batch_size × processes × steps_per_generation / num_generations = {per_batch} / "
            f"{training.num_generations}); lower per_device_train_batch_size or raise num_generations"
        )


def build_trainer(script: ScriptArguments, training: Any, model: Any, callbacks: Sequence[Any] = ()) -> Any:
    """Dataset, tokenizer, rewards and the trainer (the model is loaded here, by TRL, from its path); ``callbacks``:
    more ``TrainerCallback``s beside the metrics file (the collapse benchmark's exact trajectory); with
    ``monitor_split``, the held-out pass@k monitor (:mod:`rlvr_div.monitor`)."""
    from trl import get_peft_config

    from rlvr_div.models import (
        checkpoint_path,
        gguf_source,
        load_tokenizer,
        model_init_kwargs,
        quantization_config,
        store_portable_base,
    )
    from rlvr_div.models.lora_targets import is_lora_target_error, lora_error_line
    from rlvr_div.models.model_card import name_base_in_model_card
    from rlvr_div.monitor import recipe_monitor
    from rlvr_div.rewards import get_reward
    from rlvr_div.sampling import stop_token_ids
    from rlvr_div.tasks import get_task, get_task_spec, task_reward_settings, task_stop_text
    from rlvr_div.trainers import TRAINERS
    from rlvr_div.trainers.plugin import train_dataset_of

    dataset = train_dataset_of(training)  # an active plug-in's own training set (DPH-RL: D_exp), or the task's
    if dataset is None:
        dataset = get_task(script.task, split=script.task_split, seed=script.task_seed, **script.task_kwargs)
        if script.task_size is not None:
            dataset = dataset.select(range(min(script.task_size, len(dataset))))
    check_prompts_per_step(len(dataset), training)
    monitor = recipe_monitor(script, training)  # its held-out problems are read before the load (a bad split: one line)
    settings, options = script.reward_settings, script.task_kwargs
    reward_funcs = [
        get_reward(n, **task_reward_settings(script.task, n, settings.get(n), **options))
        for n in (script.rewards or [get_task_spec(script.task).reward])
    ]
    # a GGUF checkpoint becomes a cached plain one here: TRL loads a path and would never see gguf_file
    model_path = checkpoint_path(model.model_name_or_path, script.gguf_file, model.model_revision)
    init_kwargs = model_init_kwargs(model, training)  # every ModelConfig setting TRL's grpo script honours
    if script.gguf_file:
        init_kwargs.pop("revision", None)  # the converted checkpoint is a local directory
    training.model_init_kwargs = init_kwargs
    tokenizer = load_tokenizer(model_path, None, init_kwargs.get("revision"), training.trust_remote_code)
    trainer_cls = TRAINERS.get(script.trainer).trainer_class()
    peft_config = get_peft_config(model)
    if peft_config is not None and model.model_revision not in (None, "main"):
        peft_config.revision = model.model_revision  # the adapter records the base revision it was trained on
    with colocated_vllm_on_cpu(training):
        try:
            trainer = trainer_cls(
                model=model_path,
                reward_funcs=reward_funcs,
                args=training,
                train_dataset=dataset,
                processing_class=tokenizer,
                quantization_config=quantization_config(model),
                peft_config=peft_config,
                callbacks=[metrics_callback(Path(training.output_dir) / METRICS), epoch_replay(), *callbacks],
            )
        except ValueError as e:  # LoRA targets of a model whose config was not on disk before the load
            if is_lora_target_error(e):
                raise ConfigError(lora_error_line(e, model)) from None
            raise
    tied_weights_are_not_missing(trainer)
    stop = task_stop_text(script.task, **options)  # a few-shot prompt's newline ends a completion
    if stop is not None:  # (with use_vllm refused by the recipe checks)
        end_completions_at(trainer, stop_token_ids(tokenizer, stop))
    if monitor is not None:
        trainer.add_callback(monitor(trainer))
    # an adapter records rlvr_div/tiny_bases/tiny-<spec hash> (a shipped tiny base), tiny-<spec hash> (another) or
    # its GGUF source (package:NAME or the file), not a cache path; the model card names the base as given
    store_portable_base(trainer.model, gguf_source(model.model_name_or_path, script.gguf_file))
    name_base_in_model_card(trainer, model.model_name_or_path, script.gguf_file)
    if not script.console_logs:
        _progress_bar_only(trainer)
    return trainer


def _progress_bar_only(trainer: Any) -> None:
    """Keep the step progress bar, with the last logged reward beside it, but stop printing each log dict
    (transformers' Progress/PrinterCallback)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class StepBar(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            bar = getattr(self, "training_bar", None)
            if bar is not None and logs and "reward" in logs:
                bar.set_postfix(reward=f"{logs['reward']:.3f}", refresh=False)

    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(StepBar())


def _quiet_known_noise() -> None:
    """Silence what repeats without telling a user anything: transformers' FutureWarning on
    ``is_gradient_checkpointing`` (TRL reads the old name at every generation and save), peft's "Could not find a
    config file in package:NAME / FILE.gguf" at every adapter save (the adapter records its GGUF source as its base,
    where peft looks for a config.json to see whether the vocabulary was resized; no recipe resizes it) and the
    "Writing model shards" bar at every checkpoint (it breaks the step bar). Download and weight-loading bars stay."""
    warnings.filterwarnings("ignore", message=r".*`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r"Could not find a config file in (package:\S+|\S+\.gguf) - will assume")
    from transformers.utils import logging as hf_logging

    if not hasattr(hf_logging, "set_tqdm_hook"):
        return

    def hook(factory: Any, args: tuple, kwargs: dict) -> Any:
        if kwargs.get("desc") == "Writing model shards":
            return hf_logging.EmptyTqdm(*args, **kwargs)
        return factory(*args, **kwargs)

    hf_logging.set_tqdm_hook(hook)


def _close_step_bar(trainer: Any) -> None:
    """Close the step bar now, so that it is not redrawn after the last line at exit."""
    for callback in trainer.callback_handler.callbacks:
        bar = getattr(callback, "training_bar", None)
        if bar is not None:
            bar.close()
            callback.training_bar = None


def _shown(path: str) -> str:
    """``path`` as a user would type it here: on PATH → its name; under the current directory → relative."""
    if shutil.which(Path(path).name) == path:
        return Path(path).name
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def resume_command(argv: list[str], distributed: bool) -> str:
    """The command line that continues this run: the same command and arguments, with
    ``--resume_from_checkpoint true`` instead of any resume or overwrite flag."""
    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        key = a[2:].partition("=")[0].replace("-", "_") if a.startswith("--") else None
        if key in ("resume_from_checkpoint", "overwrite_output_dir"):
            skip = "=" not in a
            continue
        args.append(a)
    args += ["--resume_from_checkpoint", "true"]
    python, script = _shown(sys.executable), Path(sys.argv[0])
    if distributed:
        prefix = ["accelerate", "launch", "[your launch options]", "-m", "rlvr_div.train"]
    elif script.name == "__main__.py" and script.parent.name == "rlvr_div":
        prefix = [python, "-m", "rlvr_div", "train"]
    elif script.name == "train.py" and script.parent.name == "rlvr_div":
        prefix = [python, "-m", "rlvr_div.train"]
    elif script.name.startswith("rlvr-div"):
        prefix = [_shown(str(script.absolute())), "train"]
    else:
        prefix = ["rlvr-div", "train"]
    return shlex.join(prefix + args)


def _interrupted(trainer: Any, training: Any, argv: list[str], top_level: bool, event: str = "interrupted") -> str:
    """One line after Ctrl-C (or another stop, ``event``): the step reached, what is saved, and the command that
    resumes."""
    state = trainer.state
    where = f"{event} at step {state.global_step}/{state.max_steps}"
    last = last_complete_checkpoint(training.output_dir)
    if last is not None:
        saved = f"last complete checkpoint: {os.path.relpath(last)}"
    else:
        saved = f"no checkpoint saved yet (save_steps={training.save_steps}), so a rerun starts at step 0"
    if not top_level:
        return f"training {where}; {saved}"
    return f"{where}; {saved}; to continue: {resume_command(argv, training.world_size > 1)}"


def _out_of_space(trainer: Any, training: Any, argv: list[str], top_level: bool) -> str:
    """One line when the device of ``output_dir`` fills up while training or saving: the step reached, what is
    saved (a checkpoint cut short is skipped on resume: :func:`rlvr_div.run_dir.last_complete_checkpoint`), and the
    command that resumes once space is freed."""
    line = _interrupted(trainer, training, argv, top_level, event="stopped")
    line = line.replace("to continue:", "free space, then:")
    free = free_bytes(training.output_dir) / 2**20
    return f"no space left on the device of --output_dir {training.output_dir} ({free:.1f} MB free): {line}"


def _summary(trainer: Any, out_dir: str, runtime: float | None, first_step: int = 0) -> str:
    """One line after a finished run: the steps trained by this invocation (``first_step``: the step a resume started
    after), time, the last rewards, where the outputs are."""
    rewards = [x["reward"] for x in trainer.state.log_history if "reward" in x][-10:]
    now = trainer.state.global_step
    steps = f"trained {now - first_step} steps"
    if first_step:
        steps += f" (resumed after step {first_step}, now at {now})"
    parts = [steps + (f" in {runtime:.0f} s" if runtime is not None else "")]
    if rewards:
        parts.append(f"mean reward of the last {len(rewards)} logged steps {sum(rewards) / len(rewards):.3f}")
    return f"{'; '.join(parts)}; model, recipe.yaml and {METRICS} in {out_dir}"


def main(argv: list[str] | None = None, callbacks: Sequence[Any] = ()) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    top_level = argv == sys.argv[len(sys.argv) - len(argv) :]  # not called by another command (the demo)
    _quiet_known_noise()
    script, training, model = load_recipe(argv)
    with ExitStack() as held:
        if training.process_index == 0:  # one run per output_dir; the other processes of a launch are its own
            held.enter_context(directory_lock(training.output_dir, "training run", "--output_dir"))
        return _run(script, training, model, argv, top_level, callbacks)


def _resolved(script: ScriptArguments, training: Any, model: Any) -> dict[str, Any]:
    """The resolved recipe written to ``recipe.yaml`` (its sections; ``history`` is added there)."""
    return {"script": asdict(script), "training": training.to_dict(), "model": asdict(model),
            "launch": {"processes": training.world_size}}  # fmt: skip


def _run(
    script: ScriptArguments, training: Any, model: Any, argv: list[str], top_level: bool, callbacks: Sequence[Any]
) -> int:
    """Start in ``output_dir`` (new, resumed or overwritten), train, save; the lock on it is held."""
    out = training.output_dir
    # every process, read-only; the recipe as given (before the trainer fills model_init_kwargs) tells a failed start
    # of this same recipe, which starts again, from another run
    start = plan_start(
        out, training.resume_from_checkpoint, script.overwrite_output_dir, _resolved(script, training, model)
    )
    state = training.distributed_state if training.world_size > 1 else None
    if state is not None:
        state.wait_for_everyone()
    if training.process_index == 0:
        apply_start(out, start)
    if state is not None:
        state.wait_for_everyone()
    training.resume_from_checkpoint = None
    if script.threads is not None:
        import torch

        torch.set_num_threads(script.threads)
    trainer = build_trainer(script, training, model, callbacks)
    main_process = trainer.accelerator.is_main_process
    if main_process and trainer.accelerator.device.type == "cpu":  # which precision path, in one line
        warn, line = training_compute(bool(training.bf16))
        (logger.warning if warn else logger.info)(line)
    if main_process:
        write_resolved_recipe(out, _resolved(script, training, model), start)
    try:
        result = trainer.train(resume_from_checkpoint=start.checkpoint)
        trainer.save_model(out)
        if main_process:
            trainer.processing_class.save_pretrained(out)
            trainer.save_state()  # the final trainer_state.json: marks the run finished, keeps the summary
    except KeyboardInterrupt:
        if not main_process:
            raise SystemExit(130) from None
        _close_step_bar(trainer)
        raise KeyboardInterrupt(_interrupted(trainer, training, argv, top_level)) from None
    except Exception as e:
        if not out_of_space(e, out):
            raise
        if not main_process:
            raise SystemExit(2) from None
        _close_step_bar(trainer)
        raise ConfigError(_out_of_space(trainer, training, argv, top_level)) from None
    if main_process:
        print(_summary(trainer, out, result.metrics.get("train_runtime"), start.step if start.checkpoint else 0))
    if state is not None:  # leave together: a process that exits with its group alive can abort in teardown (gloo)
        state.wait_for_everyone()
        state.destroy_process_group()
    return 0


if __name__ == "__main__":
    from rlvr_div.cli import run_command

    sys.exit(run_command(main, sys.argv[1:]))
