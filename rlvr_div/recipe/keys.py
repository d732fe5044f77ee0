"""The recipe keys that are neither trainer nor model settings (:class:`ScriptArguments`): the task, the rewards,
the GGUF file, threads, the held-out monitor and how a run starts in its output directory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rlvr_div.errors import ConfigError


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
    """Recipe keys that are neither trainer nor model settings. Built, it also holds them resolved, read once (not
    fields, so a run's resolved recipe keeps the keys as given): ``task_kwargs``, the task builder's keyword options
    (``task_options``, a mapping or JSON text, plus ``path`` from ``data_path``), and ``reward_settings``, the rewards'
    settings by name (``reward_kwargs``)."""

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

    def _task_kwargs(self) -> dict[str, Any]:
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

    def _reward_settings(self) -> dict[str, dict[str, Any]]:
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

    def __post_init__(self) -> None:
        self.task_kwargs: dict[str, Any] = self._task_kwargs()
        self.reward_settings: dict[str, dict[str, Any]] = self._reward_settings()
