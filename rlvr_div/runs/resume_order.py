"""A resumed run's data order equals the uninterrupted run's.

On a resume the Hugging Face Trainer restores the random states and skips the batches already trained in the
current epoch, but it does not iterate the epochs trained before it. A sampler that draws each epoch's order from its
own generator (TRL's ``RepeatSampler``: one ``randperm`` per epoch from a generator seeded once) is then at its first
epoch's state, so a run resumed after k whole epochs would shuffle its prompts as in epoch 1 again, not as in epoch
k + 1. :func:`epoch_replay` iterates the sampler once per trained epoch before training resumes. Whatever that draws
from the global random state is undone by the Trainer, which loads the checkpoint's random states afterwards.
"""

from __future__ import annotations

from typing import Any


def epochs_trained(global_step: int, batches_per_epoch: int, accumulation: int) -> int:
    """Whole epochs in ``global_step`` optimiser steps, as the Trainer counts them on a resume: an epoch is
    ⌈batches / accumulation⌉ optimiser steps (at least 1)."""
    per_epoch = max(batches_per_epoch // accumulation + int(batches_per_epoch % accumulation > 0), 1)
    return global_step // per_epoch


def epoch_replay() -> Any:
    """A ``TrainerCallback`` that, at the start of a resumed run (``global_step`` > 0), iterates the training
    dataloader's sampler once per epoch already trained (a no-op for a fresh run or a dataloader without length)."""
    from transformers import TrainerCallback
    from transformers.trainer_pt_utils import get_dataloader_sampler

    class EpochReplay(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):  # noqa: ANN001
            if not state.global_step or train_dataloader is None:
                return
            try:
                batches = len(train_dataloader)
            except TypeError:  # an iterable dataset: no epochs to replay
                return
            sampler = get_dataloader_sampler(train_dataloader)
            if sampler is None:
                return
            for _ in range(epochs_trained(state.global_step, batches, args.gradient_accumulation_steps)):
                for _ in sampler:
                    pass

    return EpochReplay()
