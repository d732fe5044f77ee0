"""A study run that survives a kill: with ``checkpoint_every: N`` in a β-study config, ``rlvr-div train`` keeps its
last checkpoint (every N steps and at the end), and the run saves its own progress beside it after every step in
``progress.json``: the run identity, the exact path so far, the wall seconds spent, the steps it resumed at.

The next invocation of the study resumes such a run from its last complete checkpoint (step c) with the path cut to
the points at steps <= c (the progress file is written before the checkpoint of the same step, so it always covers
c). A changed run identity, an unreadable progress file or no complete checkpoint starts the run over. A resumed run
restores the optimiser, the learning-rate schedule and the random states from the checkpoint (the Hugging Face
Trainer's resume, with TRL's sampler's earlier epochs replayed: :mod:`rlvr_div.runs.resume_order`), so it ends with the
numbers of the run never interrupted where every optimiser step generates afresh (the study refuses a
``checkpoint_every`` off an arm's generation boundary). A run whose training had ended at c (its step budget, or a
path point that met the stop rule) is measured from checkpoint c without training further. Its ``result.json``
records ``resumed_at``, and its ``wall_seconds`` count every invocation up to the last step each one finished
(including the steps after c that the kill threw away).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.records import write_json
from rlvr_div.run_dir import checkpoint_step, last_complete_checkpoint

PROGRESS = "progress.json"


@dataclass
class Progress:
    """A run's progress: its path points, its start (a ``time.perf_counter()`` origin that counts the seconds of
    earlier invocations too), the checkpoint steps it resumed at, and the checkpoint this invocation starts from."""

    path: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    resumed_at: list[int] = field(default_factory=list)
    checkpoint: str | None = None

    def seconds(self) -> float:
        return time.perf_counter() - self.started


def saved_progress(directory: Path, identity: str) -> Progress | None:
    """The progress an interrupted run of ``identity`` left in ``directory``, cut back to its last complete
    checkpoint; None when the run must start over (no progress file, another identity, no complete checkpoint)."""
    checkpoint = last_complete_checkpoint(directory)
    try:
        saved = json.loads((directory / PROGRESS).read_text())
        if saved["identity"] != identity or checkpoint is None:
            return None
        step = checkpoint_step(checkpoint)
        path = [p for p in saved["path"] if p["step"] <= step]
        return Progress(path, time.perf_counter() - float(saved["seconds"]), [*saved["resumed_at"], step], checkpoint)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # no progress file, or not one of ours
        return None


def progress_saver(directory: Path, identity: str, progress: Progress) -> Any:
    """A ``TrainerCallback`` that writes ``progress.json`` (atomically) at the end of every optimiser step; it must
    come after the callback that appends the step's path point to ``progress.path``."""
    from transformers import TrainerCallback

    class SaveProgress(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            saved = {"identity": identity, "path": progress.path, "seconds": progress.seconds(),
                     "resumed_at": progress.resumed_at}  # fmt: skip
            write_json(directory / PROGRESS, saved)

    return SaveProgress()
