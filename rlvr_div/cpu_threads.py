"""How torch's CPU threads wait, for jobs that share a small machine.

torch's CPU kernels run on GNU OpenMP threads that spin while they wait for the next parallel region. Beside another
busy process on a small machine the spinning threads hold the cores the other process needs, and both slow down
several-fold. With ``OMP_WAIT_POLICY=PASSIVE`` a waiting thread sleeps instead. ``bench/bench_threads.py`` measures
it (the numbers are in docs/benchmarks_details.md, "Threads under load").

The policy is read once, when torch loads GNU OpenMP, so it must be in the environment before ``import torch``; a
process's children inherit it (a study's workers, ``rlvr-div train`` started by a script).
"""

from __future__ import annotations

import os
import sys

WAIT_POLICY = "OMP_WAIT_POLICY"
PASSIVE = "PASSIVE"


def prefer_passive_waiting() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` for this process and its children unless the environment already names a wait
    policy (the user's choice wins: ``OMP_WAIT_POLICY=ACTIVE rlvr-div ...`` restores spinning). Returns whether the
    policy now in the environment takes effect in this process (False once torch is imported: then only its
    children get it)."""
    os.environ.setdefault(WAIT_POLICY, PASSIVE)
    return "torch" not in sys.modules
