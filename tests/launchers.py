"""Launchers for multi-process CPU tests.

``torch.distributed.run`` (torchrun), not ``accelerate launch --cpu --num_processes 2``: with accelerate 1.15 the
latter starts a single process on CPU, so a "2-process" test would pass on one. Every run records the number of
processes it ran with in ``<output_dir>/recipe.yaml`` (``launch.processes``); :func:`processes_of` reads it back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

TWO_PROCESSES = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]


def processes_of(output_dir: Path) -> int:
    """The number of processes the run in ``output_dir`` trained with."""
    return yaml.safe_load((Path(output_dir) / "recipe.yaml").read_text())["launch"]["processes"]
