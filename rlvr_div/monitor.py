"""Held-out pass@k while training: see collapse while it happens.

:class:`PassAtKMonitor`, a ``transformers.TrainerCallback``, samples n completions of each of M held-out problems with
the trained model (in eval mode; its train mode is restored after) at step 0 (the base, before any update), every
``every`` steps and at the last step, scores them with the task's reward (correct = score 1) and logs, with c_i the
correct samples of problem i now and b_i at step 0:

- ``monitor/pass@k`` = mean_i ρ(n, c_i, k), with ρ(n, c, k) = 1 − C(n−c, k)/C(n, k) the unbiased estimator
  (:func:`rlvr_div.passk.pass_at_k`), for k = 1, 2, 4, … and n;
- ``monitor/lost_vs_base`` = #{i : b_i > 0, c_i = 0} and ``monitor/gained_vs_base`` = #{i : b_i = 0, c_i > 0}: at
  k = n, the expected lost Σ_i ρ(n, b_i, k)·(1 − ρ(n, c_i, k)) is this count, since ρ(n, c, n) = 1[c > 0];
- ``monitor/seconds``: the time the measurement took.

With ``stop_on_overtake``, a measurement where the base leads (lost − gained ≥ ``overtake_margin`` problems) warns in
one line and stops the run after saving that step. At the end of training ``<output_dir>/training_curve.png`` is drawn
from the record (:func:`draw_training_curve`).

The metrics go through the trainer's log (a TRL trainer's metric lists, so they share the step's line), so they reach
``report_to`` and ``metrics.jsonl``. When ``lost_vs_base`` is > 0 and larger than at the previous measurement, one
warning line says so.

Sampling is :class:`rlvr_div.sampling.HFSampler` with a fixed seed: sample j of problem i is drawn from the same
uniforms at every measurement, so a problem's samples change only where the policy moved (common random numbers).

Record: ``<output_dir>/monitor.jsonl``, one line per measurement, ``{"step", "n", "c": [c_i], "seconds",
"settings"}``, appended and fsynced. A run that starts at step 0 starts the file again; a resumed run keeps the lines
up to its checkpoint's step and reads the base counts back from the step-0 line (the base is no longer at hand), if
that line was made with the same settings.

Every process samples (under ZeRO-3 or FSDP a forward pass needs them all); the main one writes and warns.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import Trainer, TrainerCallback

from rlvr_div.errors import ConfigError
from rlvr_div.passk import pass_at_k, report_ks
from rlvr_div.run_dir import truncate_metrics
from rlvr_div.sampling import HFSampler, SamplingConfig
from rlvr_div.trainers.trl_seam import metrics as trl_metrics

logger = logging.getLogger("rlvr_div.monitor")

MONITOR_FILE = "monitor.jsonl"
CURVE_FILE = "training_curve.png"
PREFIX = "monitor/"


# --------------------------------------------------------------------------------------------- numbers


def monitor_metrics(n: int, counts: Sequence[int], base: Sequence[int] | None) -> dict[str, float]:
    """The logged numbers of one measurement (module docstring): pass@k for k in :func:`report_ks` (n), and, with the
    ``base`` counts, the problems lost and gained at k = n."""
    c = np.asarray(counts, dtype=np.int64)
    ks = report_ks(n)
    now = pass_at_k([n] * len(c), c, ks)  # (problems, ks)
    out = {f"{PREFIX}pass@{k}": float(now[:, j].mean()) for j, k in enumerate(ks)}
    if base is None:
        return out
    lost, gained = lost_and_gained(counts, base)
    return out | {f"{PREFIX}lost_vs_base": float(lost), f"{PREFIX}gained_vs_base": float(gained)}


def lost_and_gained(counts: Sequence[int], base: Sequence[int]) -> tuple[int, int]:
    """(#{i : b_i > 0, c_i = 0}, #{i : b_i = 0, c_i > 0}): problems the base's samples solve and the policy's do not,
    and the reverse."""
    c, b = np.asarray(counts, dtype=np.int64), np.asarray(base, dtype=np.int64)
    if b.shape != c.shape:
        raise ValueError(f"the base has {b.size} problems, this measurement {c.size}")
    return int(((b > 0) & (c == 0)).sum()), int(((b == 0) & (c > 0)).sum())


def lost_warning(step: int, n: int, counts: Sequence[int], base: Sequence[int], before: float) -> str | None:
    """The one warning line when the problems lost to the base (solved by its n samples at step 0, by none of the
    policy's n now) are > 0 and more than ``before`` (at the previous measurement); None otherwise."""
    lost, _ = lost_and_gained(counts, base)
    if lost == 0 or lost <= before:
        return None
    solved = sum(b > 0 for b in base)
    return (
        f"step {step}: the policy has lost {lost} of the {solved} held-out problems the base solved (none of its "
        f"{n} samples correct; {before:g} at the previous measurement): pass@{n} "
        f"{sum(c > 0 for c in counts) / len(counts):.3f}, the base's {solved / len(base):.3f}"
    )


# --------------------------------------------------------------------------------------------- the curve


def draw_training_curve(record: str | os.PathLike, path: str | os.PathLike) -> Path | None:
    """``path`` (PNG) from the monitor's ``record`` (one line per measurement): pass@1 and pass@n of the policy per
    step, the base's (step 0) as dashed lines, and the problems lost to the base on a second axis. None when the
    record has no measurement."""
    records = []
    for line in Path(record).read_text().splitlines() if Path(record).exists() else []:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and isinstance(r.get("step"), int) and isinstance(r.get("c"), list):
            records.append(r)
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = records[-1]["n"]  # the records made with the last one's settings (a resume with others starts a new base)
    records = [r for r in records if r.get("settings") == records[-1].get("settings") and r["n"] == n]
    steps = [r["step"] for r in records]
    p1 = [float(pass_at_k([n] * len(r["c"]), r["c"], [1])[:, 0].mean()) for r in records]
    pn = [sum(c > 0 for c in r["c"]) / len(r["c"]) for r in records]
    base = records[0]["c"] if records[0]["step"] == 0 else None
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.plot(steps, p1, marker="o", color="tab:blue", label="pass@1")
    ax.plot(steps, pn, marker="o", color="tab:orange", label=f"pass@{n}")
    if base is not None:
        ax.axhline(p1[0], color="tab:blue", linestyle="--", linewidth=1, label="base pass@1")
        ax.axhline(pn[0], color="tab:orange", linestyle="--", linewidth=1, label=f"base pass@{n}")
    ax.set_xlabel("step")
    ax.set_ylabel("held-out pass@k")
    ax.set_ylim(0, 1.02)
    handles, labels = ax.get_legend_handles_labels()
    if base is not None:
        lost = [lost_and_gained(r["c"], base)[0] for r in records]
        ax2 = ax.twinx()
        ax2.bar(steps, lost, width=max(1, (max(steps) - min(steps)) / 60), color="tab:red", alpha=0.35,
                label="problems lost to the base")  # fmt: skip
        ax2.set_ylabel("problems lost to the base", color="tab:red")
        ax2.set_ylim(0, max(1, max(lost)) * 1.1)
        ax.set_zorder(ax2.get_zorder() + 1)  # the lines over the bars
        ax.patch.set_visible(False)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.12, 1), fontsize="small", frameon=False)
    ax.set_title(f"held-out pass@k while training ({len(records[-1]['c'])} problems, n = {n})")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


# --------------------------------------------------------------------------------------------- from a recipe


def recipe_monitor(script: Any, training: Any) -> Callable[[Any], PassAtKMonitor] | None:
    """The monitor a recipe asks for, as a function of the trainer; its inputs are built here, before the model
    loads (a split the task does not have is one line): the first ``monitor_size`` problems of ``monitor_split``, the
    task's own reward with the recipe's ``reward_kwargs`` for it, the sampling settings (``monitor_n``, the recipe's
    ``temperature``, ``top_p`` and ``seed``, ``monitor_max_new_tokens`` or ``max_completion_length``, the task's stop
    text), every ``monitor_steps`` steps. None when ``monitor_split`` is unset."""
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task, get_task_spec, task_reward_settings, task_stop_text

    if script.monitor_split is None:
        return None
    options = script.task_kwargs
    dataset = get_task(script.task, split=script.monitor_split, seed=script.task_seed, **options)
    if script.monitor_size is not None:
        dataset = dataset.select(range(min(script.monitor_size, len(dataset))))
    name = get_task_spec(script.task).reward
    reward = get_reward(name, **task_reward_settings(script.task, name, script.reward_settings.get(name), **options))
    sampling = SamplingConfig(
        n=script.monitor_n,
        temperature=training.temperature,
        top_p=getattr(training, "top_p", 1.0),
        max_new_tokens=script.monitor_max_new_tokens or training.max_completion_length,
        seed=training.seed,
        stop_text=task_stop_text(script.task, **options),
    )
    where = {"task": script.task, "split": script.monitor_split, "task_seed": script.task_seed, "task_options": options}
    return functools.partial(
        PassAtKMonitor,
        dataset=dataset,
        reward=reward,
        sampling=sampling,
        every=script.monitor_steps,
        settings=where,
        stop_on_overtake=script.monitor_stop_on_overtake,
        overtake_margin=script.monitor_overtake_margin,
    )


# --------------------------------------------------------------------------------------------- the callback


class PassAtKMonitor(TrainerCallback):
    """Held-out pass@k of the trained model at step 0, every ``every`` steps and at the last step (module docstring).

    ``trainer``: a ``transformers.Trainer`` (TRL's GRPOTrainer or a subclass: the metrics join the step's log line);
    ``dataset``: the held-out problems (a ``prompt`` column and the reward's columns); ``reward``: a
    :class:`rlvr_div.rewards.Reward` (batch ``score`` API, ``columns``); ``sampling``: n, temperature, top_p, length,
    seed; ``every``: None measures at step 0 and the last step only; ``path``: the record (default
    ``<output_dir>/monitor.jsonl``); ``settings``: what else a resumed run must share with the base record (the
    task and split). Add it with ``trainer.add_callback(PassAtKMonitor(trainer, ...))``."""

    def __init__(
        self,
        trainer: Any,
        dataset: Any,
        reward: Any,
        sampling: SamplingConfig,
        every: int | None = None,
        path: str | os.PathLike | None = None,
        settings: dict[str, Any] | None = None,
        stop_on_overtake: bool = False,
        overtake_margin: int = 1,
        curve: str | os.PathLike | None = None,
    ) -> None:
        if every is not None and every < 1:
            raise ConfigError(f"monitor every={every} must be >= 1 steps")
        if overtake_margin < 1:
            raise ConfigError(f"monitor overtake_margin={overtake_margin} must be >= 1 problems")
        self.trainer = trainer
        self.prompts = list(dataset["prompt"])
        self.columns = {c: list(dataset[c]) for c in reward.columns}
        self.reward = reward
        self.sampling = sampling
        self.every = every
        self.path = Path(path) if path is not None else Path(trainer.args.output_dir) / MONITOR_FILE
        self.curve = Path(curve) if curve is not None else self.path.parent / CURVE_FILE
        self.stop_on_overtake = stop_on_overtake
        self.overtake_margin = overtake_margin
        self.overtaken = False  # the last measurement found the base ahead by the margin
        sampled = {k: v for k, v in sampling.to_dict().items() if k != "batch_size"}  # batches change no sample
        described = {"problems": len(self.prompts), "sampling": sampled, "reward": reward.name,
                     "reward_settings": reward.settings(), **(settings or {})}  # fmt: skip
        self.settings = json.loads(json.dumps(described))  # as a record reads back
        self.base: list[int] | None = None
        self.lost = 0.0  # problems lost to the base at the last measurement
        self.measured: int | None = None  # the step of the last measurement

    # -- events

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Step 0: measure the base (a fresh record); a resumed run: read its record back."""
        if state.global_step > 0:
            self.read_back(state)
            return
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)
        Trainer.log(self.trainer, self.measure(state))  # its own line at step 0 (no TRL metrics to join)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Every ``every`` steps and at the last: measure, and log with the step's line."""
        step = state.global_step
        due = (self.every is not None and step % self.every == 0) or step >= state.max_steps
        if not due or step == self.measured:
            return
        metrics = self.measure(state)
        if self.stop_on_overtake and self.overtaken:  # saved first, then stopped (the Trainer's order)
            control.should_save = True
            control.should_training_stop = True
        try:
            pending = trl_metrics(self.trainer, "train")
        except (AttributeError, KeyError, TypeError):  # not a TRL trainer: a line of its own
            Trainer.log(self.trainer, metrics)
            return
        for key, value in metrics.items():
            pending[key].append(value)
        control.should_log = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A run stopped before its last step (by another callback) is measured where it stopped; then the curve is
        drawn from the whole record (a resumed run's earlier measurements included)."""
        if self.measured != state.global_step:
            Trainer.log(self.trainer, self.measure(state))
        if state.is_world_process_zero:
            try:
                draw_training_curve(self.path, self.curve)
            except (OSError, ValueError, RuntimeError) as e:  # a plot is not worth the run's end
                logger.warning("could not draw %s: %s", self.curve, e)

    # -- measuring and the record

    def counts(self) -> list[int]:
        """Correct samples per problem (c_i of n) of the trainer's model now, in eval mode, under the training's
        mixed precision; the model's mode is restored after."""
        import torch
        from trl.models import unwrap_model_for_generation

        trainer, args = self.trainer, self.trainer.args
        out: list[int] = []
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True),
            gradient_checkpointing_kwargs=getattr(args, "gradient_checkpointing_kwargs", None),
        ) as model:
            training = model.training
            model.eval()
            try:
                with torch.no_grad(), trainer.accelerator.autocast():
                    sampler = HFSampler(model, trainer.processing_class, self.sampling)
                    for item in sampler.sample(self.prompts, progress=False):
                        k = len(item.completions)
                        columns = {c: [values[item.index]] * k for c, values in self.columns.items()}
                        scores = self.reward.score(item.completions, **columns)
                        out.append(sum(s is not None and float(s) == 1.0 for s in scores))
            finally:
                model.train(training)
        return out

    def measure(self, state: Any) -> dict[str, float]:
        """Sample, score, record and warn; the metrics to log."""
        start = time.perf_counter()
        counts = self.counts()
        seconds = time.perf_counter() - start
        step, n = state.global_step, self.sampling.n
        if step == 0:
            self.base = counts
        metrics = monitor_metrics(n, counts, self.base) | {f"{PREFIX}seconds": seconds}
        if state.is_world_process_zero:
            record = {"step": step, "n": n, "c": counts, "seconds": round(seconds, 3), "settings": self.settings}
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
            if self.base is not None:
                line = lost_warning(step, n, counts, self.base, self.lost)
                if line is not None:
                    logger.warning("%s", line)
        self.overtaken = False
        if self.base is not None:
            self.lost = metrics[f"{PREFIX}lost_vs_base"]
            lead = self.lost - metrics[f"{PREFIX}gained_vs_base"]
            self.overtaken = lead >= self.overtake_margin
            if self.stop_on_overtake and self.overtaken and state.is_world_process_zero:
                logger.warning(
                    "step %d: the base overtook the policy on the held-out problems (lost %d, gained %d, margin %d): "
                    "stopping the run after saving this step (monitor_stop_on_overtake)",
                    step, self.lost, metrics[f"{PREFIX}gained_vs_base"], self.overtake_margin,
                )  # fmt: skip
        self.measured = step
        return metrics

    def read_back(self, state: Any) -> None:
        """A resumed run: keep the record's lines up to this step (later ones and a torn last line are dropped),
        take the base counts from its step-0 line when that was made with these settings."""
        step = state.global_step
        if state.is_world_process_zero:
            truncate_metrics(self.path, step)
        records = []
        for line in self.path.read_text().splitlines() if self.path.exists() else []:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
                records.append(record)
        records = [r for r in records if r.get("settings") == self.settings]
        if not records or records[0]["step"] != 0:
            if state.is_world_process_zero:
                logger.warning(
                    "%s has no step-0 measurement with this run's monitor settings, so problems lost to the base are "
                    "not reported after this resume",
                    self.path,
                )
            return
        self.base = list(records[0]["c"])
        last = records[-1]
        self.measured = last["step"]
        self.lost = float(lost_and_gained(last["c"], self.base)[0])
