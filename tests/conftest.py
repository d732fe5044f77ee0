"""Shared fixtures: offline hub, the built-in tiny base model (built once per cache directory)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")


@pytest.fixture(scope="session")
def tiny_path() -> str:
    """Directory of the built-in tiny base (built on first use, then cached)."""
    from rlvr_div.models import tiny_model_path

    return str(tiny_model_path(progress=False))
