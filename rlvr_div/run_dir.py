"""The output directory of a training run: what an earlier run left there, and how a new run starts over it.

A run writes ``recipe.yaml`` (the resolved recipe), ``metrics.jsonl`` (one line per logging step), ``checkpoint-N/``
folders and, when it finishes, the model or adapter, its tokenizer and ``trainer_state.json``. A new run into a
directory that holds such a run must say what to do with it:

- ``--resume_from_checkpoint true`` continues from the last complete checkpoint (step N): ``metrics.jsonl`` is cut to
  the lines of steps <= N and checkpoints after N (an abandoned continuation) are deleted, so every step is logged
  once and a later resume cannot pick a checkpoint of the abandoned run;
- ``--overwrite_output_dir true`` deletes the earlier run's files (:data:`RUN_FILES`; other files stay) and starts
  at step 0;
- neither: the run is refused with one line naming both, unless the directory holds only what a run that failed
  before its first checkpoint leaves (``recipe.yaml``, maybe ``metrics.jsonl``; no checkpoint, no final state, no
  model) and this run's recipe is the same: then it starts again at step 0 (``restart``: the failed start's metrics
  lines are dropped, its ``history`` kept). A failed start with another recipe is refused, naming the keys that
  differ.

The choice, and what it removed, is appended to ``history`` in ``recipe.yaml``.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from rlvr_div.errors import ConfigError

RESOLVED_SECTIONS = {"script", "training", "model"}
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


logger = logging.getLogger("rlvr_div.run_dir")

METRICS = "metrics.jsonl"
RECIPE = "recipe.yaml"
FINAL_STATE = "trainer_state.json"  # written at the top of output_dir when a run finishes
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
# what a run that fails before its first checkpoint can leave at the top of output_dir (runs/: TensorBoard's log dir)
_FAILED_START_FILES = {RECIPE, METRICS, "runs"}
# What a run writes at the top of output_dir (checkpoint-N/ folders aside): deleted by overwrite_output_dir.
RUN_FILES = (
    RECIPE, METRICS, FINAL_STATE, "training_args.bin", "README.md", "runs",  # runs/: TensorBoard's default log dir
    "config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors",
    "model.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json",
    "adapter_config.json", "adapter_model.safetensors", "adapter_model.bin",
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "vocab.txt", "merges.txt", "chat_template.jinja", "chat_template.json",
)  # fmt: skip


def checkpoints(out_dir: str | os.PathLike) -> dict[int, Path]:
    """``checkpoint-N`` folders of ``out_dir`` by step N (complete or not)."""
    found = {}
    if os.path.isdir(out_dir):
        for entry in os.listdir(out_dir):
            match = _CHECKPOINT.fullmatch(entry)
            if match and os.path.isdir(os.path.join(out_dir, entry)):
                found[int(match.group(1))] = Path(out_dir) / entry
    return found


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The ``global_step`` in a checkpoint's ``trainer_state.json`` (None when it is missing or unreadable)."""
    try:
        return int(json.loads((Path(path) / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def last_complete_checkpoint(out_dir: str | os.PathLike) -> str | None:
    """The highest ``checkpoint-N`` in ``out_dir`` whose ``trainer_state.json`` exists and parses.

    The Trainer writes ``trainer_state.json`` last, so a run killed while saving leaves a checkpoint without it;
    such a checkpoint is skipped (with a warning) in favour of the previous complete one.
    """
    for _step, path in sorted(checkpoints(out_dir).items(), reverse=True):
        if checkpoint_step(path) is None:
            logger.warning("skipping %s: it has no readable trainer_state.json (interrupted while saving)", path)
            continue
        return str(path)
    return None


@dataclass(frozen=True)
class EarlierRun:
    """What an earlier run left in an output directory."""

    finished_at: int | None  # global step of a finished run (its final trainer_state.json), else None
    checkpoint: str | None  # last complete checkpoint
    checkpoint_at: int | None
    failed_start: bool = False  # only recipe.yaml (and metrics.jsonl, runs/): it stopped before its first checkpoint

    def describe(self) -> str:
        if self.failed_start:
            return "a run that stopped before its first checkpoint"
        if self.finished_at is not None:
            return f"a finished run ({self.finished_at} steps)"
        if self.checkpoint is not None:
            return f"a partial run (last complete checkpoint: step {self.checkpoint_at})"
        return "a partial run (no complete checkpoint)"


def earlier_run(out_dir: str | os.PathLike) -> EarlierRun | None:
    """The run in ``out_dir`` (a resolved recipe, metrics, checkpoints or a final state), None when there is none."""
    out = Path(out_dir)
    marks = [out / RECIPE, out / METRICS, out / FINAL_STATE]
    if not any(p.exists() for p in marks) and not checkpoints(out):
        return None
    finished = checkpoint_step(out) if (out / FINAL_STATE).exists() else None
    last = last_complete_checkpoint(out)
    return EarlierRun(finished, last, checkpoint_step(last) if last else None, _is_failed_start(out))


def _is_failed_start(out: Path) -> bool:
    """``out`` holds a ``recipe.yaml`` and nothing else a run writes but ``metrics.jsonl`` (and ``runs/``): no
    checkpoint (complete or not), no final state, no saved model or tokenizer."""
    if not (out / RECIPE).is_file() or checkpoints(out):
        return False
    written = {e for e in os.listdir(out) if any(fnmatch.fnmatch(e, pattern) for pattern in RUN_FILES)}
    return written <= _FAILED_START_FILES


def recipe_changes(out_dir: str | os.PathLike, resolved: dict[str, Any]) -> list[str] | None:
    """The keys whose value differs between ``out_dir``'s ``recipe.yaml`` and ``resolved`` (this run's recipe, as
    :func:`write_resolved_recipe` takes it), compared as the recipes they train (:func:`recipe_from_resolved`: values
    the trainer derives or masks left out), without the keys that say how a run was started. None when
    ``recipe.yaml`` is missing or unreadable."""
    try:
        before = yaml.safe_load((Path(out_dir) / RECIPE).read_text())
        old = {**recipe_from_resolved(before), "launch": before.get("launch")}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TypeError, KeyError, AttributeError):
        return None
    resolved = json.loads(json.dumps(resolved, default=str))
    new = {**recipe_from_resolved(resolved), "launch": resolved.get("launch")}
    keys = set(old) | set(new)
    return sorted(k for k in keys if k not in _START_RECIPE_KEYS and old.get(k) != new.get(k))


def _resume_request(value: Any) -> str | None:
    """TRL's ``resume_from_checkpoint``: unset/false → None, ``true``/``last`` → ``"last"``, else a path."""
    if value is None or str(value).lower() in ("", "false", "no", "none"):
        return None
    if str(value).lower() in ("true", "yes", "last"):
        return "last"
    return str(value)


@dataclass
class RunStart:
    """How this run starts in its output directory (recorded in ``recipe.yaml`` under ``history``, with the time and
    the directory that relative paths were read from)."""

    action: str  # "new" | "resume" | "overwrite" | "restart" (a failed start, same recipe, again from step 0)
    checkpoint: str | None = None  # the checkpoint it resumes from
    step: int = 0  # the step it starts after
    earlier: str | None = None  # what was in output_dir before
    metrics_lines_dropped: int = 0
    removed: list[str] = field(default_factory=list)  # checkpoints or files deleted

    def record(self) -> dict[str, Any]:
        entry = {"action": self.action, "time": datetime.now(UTC).isoformat(timespec="seconds"), "cwd": os.getcwd()}
        entry.update({k: v for k, v in asdict(self).items() if k != "action" and v not in (None, [], 0)})
        if self.action == "resume":
            entry.update(step=self.step, metrics_lines_dropped=self.metrics_lines_dropped)
        elif self.action == "restart":
            entry.update(metrics_lines_dropped=self.metrics_lines_dropped)
        return entry


def plan_start(out_dir: str, resume: Any, overwrite: bool, resolved: dict[str, Any] | None = None) -> RunStart:
    """Decide how a run starts in ``out_dir`` without touching it (every process may call it).

    ``resolved``: this run's resolved recipe (as :func:`write_resolved_recipe` takes it); with it, a directory that
    holds only a failed start of the same recipe starts again (``restart``) without ``resume`` or ``overwrite``.
    Raises a one-line :class:`ConfigError` when ``out_dir`` holds a run and neither ``resume`` nor ``overwrite`` is
    set, when both are set, or when an explicit checkpoint is not a directory.
    """
    request = _resume_request(resume)
    if request is not None and overwrite:
        raise ConfigError("resume_from_checkpoint and overwrite_output_dir are both set: choose one")
    earlier = earlier_run(out_dir)
    described = earlier.describe() if earlier else None
    if request is None and not overwrite:
        if earlier is None:
            return RunStart("new")
        changed = recipe_changes(out_dir, resolved) if earlier.failed_start and resolved is not None else None
        if changed == []:
            logger.info("output_dir %s holds %s with the same recipe: starting it again at step 0", out_dir, described)
            return RunStart("restart", earlier=described)
        if changed:
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            described += f" with another recipe (differs in {shown})"
        raise ConfigError(
            f"output_dir {out_dir!r} holds {described}: pass --resume_from_checkpoint true to continue it, "
            "--overwrite_output_dir true to start over, or another --output_dir"
        )
    if overwrite:
        return RunStart("overwrite" if earlier else "new", earlier=described)
    if request == "last":
        checkpoint = earlier.checkpoint if earlier else None
        if checkpoint is None:
            logger.warning("no complete checkpoint in %s: starting from step 0", out_dir)
    else:
        if not os.path.isdir(request):
            raise ConfigError(f"resume_from_checkpoint {request!r} is not a directory")
        if checkpoint_step(request) is None:
            raise ConfigError(f"resume_from_checkpoint {request!r} has no readable trainer_state.json")
        checkpoint = request
    step = checkpoint_step(checkpoint) if checkpoint else 0
    return RunStart("resume" if earlier or checkpoint else "new", checkpoint, step or 0, earlier=described)


def apply_start(out_dir: str, start: RunStart) -> RunStart:
    """Make ``out_dir`` match ``start`` (main process only): delete an overwritten run, or cut a resumed one back to
    its checkpoint (metrics lines after its step, later checkpoints, the final state of an earlier finish)."""
    out = Path(out_dir)
    if start.action == "overwrite":
        for _step, path in sorted(checkpoints(out).items()):
            shutil.rmtree(path)
            start.removed.append(path.name)
        for entry in sorted(os.listdir(out)) if out.is_dir() else []:
            if any(fnmatch.fnmatch(entry, pattern) for pattern in RUN_FILES):
                target = out / entry
                if target.is_dir():
                    shutil.rmtree(target)
                else:
                    target.unlink()
                start.removed.append(entry)
    elif start.action == "resume":
        keep = Path(start.checkpoint).resolve() if start.checkpoint else None
        for step, path in sorted(checkpoints(out).items()):
            if step > start.step and path.resolve() != keep:
                shutil.rmtree(path)
                start.removed.append(path.name)
        if (out / FINAL_STATE).exists():
            (out / FINAL_STATE).unlink()
            start.removed.append(FINAL_STATE)
        start.metrics_lines_dropped = truncate_metrics(out / METRICS, start.step)
    elif start.action == "restart":
        start.metrics_lines_dropped = truncate_metrics(out / METRICS, 0)
        if start.metrics_lines_dropped:
            logger.warning(
                "dropped the %d lines of %s logged by the failed start", start.metrics_lines_dropped, METRICS
            )
    return start


def truncate_metrics(path: str | os.PathLike, step: int) -> int:
    """Keep the lines of ``metrics.jsonl`` logged at steps <= ``step``; drop later ones, torn lines (a kill while
    writing) and end-of-training summaries. Returns how many lines were dropped. The file is replaced atomically."""
    path = Path(path)
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            ok = isinstance(record, dict) and int(record["step"]) <= step and "train_runtime" not in record
        except (ValueError, KeyError, TypeError):
            ok = False
        if ok:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(x + "\n" for x in kept))
        os.replace(tmp, path)
    return dropped


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# keys that say how a run was started, not what it trains (in recipe.yaml's sections, and as recipe keys)
_START_KEYS = {"training.resume_from_checkpoint", "script.overwrite_output_dir"}
_START_RECIPE_KEYS = {k.partition(".")[2] for k in _START_KEYS}


def write_resolved_recipe(out_dir: str, resolved: dict[str, Any], start: RunStart) -> None:
    """``<output_dir>/recipe.yaml``: the recipe as resolved (every key, defaults included) and ``history``, one entry
    per start of the run in this directory. A resume keeps the earlier entries and records the keys whose value
    changed since (``changed: {key: [before, now]}``)."""
    os.makedirs(out_dir, exist_ok=True)
    path = Path(out_dir) / RECIPE
    resolved = json.loads(json.dumps(resolved, default=str))
    entry = start.record()
    history: list[dict[str, Any]] = []
    if start.action in ("resume", "restart") and path.exists():
        try:
            before = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError:
            before = {}
        history = list(before.pop("history", []) or [])
        old, new = _flatten(before), _flatten(resolved)
        keys = sorted((set(old) | set(new)) - _START_KEYS)
        changed = {k: [old.get(k), new.get(k)] for k in keys if old.get(k) != new.get(k)}
        if changed:
            entry["changed"] = changed
    with open(path, "w") as f:
        yaml.safe_dump({**resolved, "history": [*history, entry]}, f, sort_keys=False)
