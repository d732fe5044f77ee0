"""rlvr_div.runs.resume_order: the epochs a resumed run replays, counted as the Trainer counts them."""

import pytest

from rlvr_div.runs.resume_order import epochs_trained


@pytest.mark.parametrize(
    "step, batches, accumulation, epochs",
    [(0, 2, 1, 0), (3, 2, 1, 1), (4, 2, 1, 2), (7, 5, 2, 2), (5, 5, 2, 1), (9, 1, 4, 9)],
)
def test_whole_epochs_in_the_steps_trained(step, batches, accumulation, epochs):
    # 5 batches with accumulation 2 make 3 optimiser steps per epoch; 1 batch with accumulation 4 makes 1
    assert epochs_trained(step, batches, accumulation) == epochs
